"""Extra argv words for a server (`extra_args`), checked against the pinned server's option table.

The option tables are data read off the pinned software (`llamacpp/llama_server_options.json`
from llama-server b11434's `--help`, `vllm/vllm_serve_options.json` from vLLM 0.33's own
parser; `tests/support/option_tables.py` regenerates both and a contract test compares). Each
option lists every spelling (short, long, aliases, negative forms) and how many values it
takes. `argv_problems` reads extra words as the server's own parser would, and refuses:

- an option the program renders itself (named by the input that sets it), in any spelling,
  `--flag=value` and argparse abbreviations included;
- an option the server does not know (naming the nearest one it knows), or one the program
  refuses for a reason of its own (a secret in argv, an option that exits instead of serving);
- an option without its value, a value where an option was expected, a value not among the
  option's choices.

Every word is a plain argv word (`ArgvWord`): printable, no control characters or line breaks,
at most `MAX_WORD` characters. Words are passed as argv, never through a shell.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from components.validation import Location, Problem, ref, shown

MAX_WORD = 4096
"""Longest extra argv word (a chat template is a file, not an argument)."""
MAX_WORDS = 256
LLAMA_SERVER_TABLE = Path(__file__).parent / "llamacpp" / "llama_server_options.json"
VLLM_SERVE_TABLE = Path(__file__).parent / "vllm" / "vllm_serve_options.json"


def _argv_word(value: str) -> str:
    if len(value) > MAX_WORD:
        raise ValueError(f"is longer than {MAX_WORD} characters")
    if not value.isprintable():
        raise ValueError("holds a control character or a line break (an argv word is one line)")
    return value


ArgvWord = Annotated[str, AfterValidator(_argv_word)]
"""One argv word: printable text (spaces, quotes and `$` are plain characters), one line."""
ExtraArgs = Annotated[list[ArgvWord], Field(max_length=MAX_WORDS)]
"""Argv words appended after the rendered flags."""


@dataclass(frozen=True)
class Option:
    """One option of a server: its spellings and the values it takes."""

    names: tuple[str, ...]
    values: int | str
    """How many values follow: 0, 1, 2, or argparse's `?`, `+`, `*`."""
    hint: str | None = None
    choices: tuple[str, ...] | None = None
    group: str | None = None
    """vLLM's argument group (the config the option sets: `CacheConfig`, `Frontend`, ...)."""

    @property
    def name(self) -> str:
        """The option as messages name it: its first long spelling."""
        return next((n for n in self.names if n.startswith("--")), self.names[0])


@dataclass(frozen=True)
class OptionTable:
    """A server's options, and how its parser reads argv."""

    software: str
    options: tuple[Option, ...]
    argparse: bool
    """vLLM's argparse: `--flag=value`, unique prefixes of long options, `--json-arg.key`;
    llama.cpp's parser reads neither (`--flag=value` is an unknown option there)."""

    @functools.cached_property
    def by_name(self) -> dict[str, Option]:
        """Every spelling → its option."""
        return {name: option for option in self.options for name in option.names}

    def lookup(self, spelling: str) -> Option | None:
        """The option a spelling names (both parsers read `_` as `-` in a `--` spelling)."""
        if spelling.startswith("--"):
            spelling = "--" + spelling[2:].replace("_", "-")
        return self.by_name.get(spelling)

    def abbreviated(self, spelling: str) -> list[Option]:
        """The options a `--` prefix stands for in argparse (empty: none, or not argparse)."""
        if not self.argparse or not spelling.startswith("--"):
            return []
        spelling = "--" + spelling[2:].replace("_", "-")
        found = {
            id(option): option
            for name, option in self.by_name.items()
            if name.startswith(spelling) and name.startswith("--")
        }
        return list(found.values())

    def nearest(self, spelling: str) -> str | None:
        """The known spelling closest to a mistyped one."""
        close = difflib.get_close_matches(spelling, list(self.by_name), n=1, cutoff=0.6)
        return close[0] if close else None


@functools.cache
def option_table(path: Path, software_argparse: bool) -> OptionTable:
    """A committed option table."""
    data: dict[str, Any] = json.loads(path.read_text())
    options = tuple(
        Option(
            names=tuple(entry["names"]),
            values=entry["values"],
            hint=entry.get("hint"),
            choices=None if entry.get("choices") is None else tuple(entry["choices"]),
            group=entry.get("group"),
        )
        for entry in data["options"]
    )
    return OptionTable(data["software"], options, software_argparse)


def llama_server_options() -> OptionTable:
    """llama-server b11434's options."""
    return option_table(LLAMA_SERVER_TABLE, False)


def vllm_serve_options() -> OptionTable:
    """vLLM 0.33's `vllm serve` options."""
    return option_table(VLLM_SERVE_TABLE, True)


@dataclass(frozen=True)
class ExtraArg:
    """One option of the extra words, as the server reads it."""

    index: int
    """Where its option word is in the extra words."""
    spelling: str
    """The option as written (before any `=value`)."""
    option: Option
    values: tuple[str, ...]


def owned_spellings(table: OptionTable, owners: Mapping[str, Location]) -> dict[Option, Location]:
    """Each option the program renders (`owners`: one spelling → the input that sets it),
    with every spelling of that option: a short form or a `--no-` form is the same option."""
    owned: dict[Option, Location] = {}
    for spelling, location in owners.items():
        option = table.lookup(spelling)
        if option is None:
            raise ValueError(f"{spelling} is not an option of {table.software}")
        owned.setdefault(option, location)
    return owned


def _is_option_word(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _is_number(word)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _not_a_value(table: OptionTable, word: str) -> bool:
    """A word that cannot be an option's value: an option of the server (llama.cpp would take
    it as the value all the same, which is never what was meant), or, for argparse, any word
    it reads as an option (a dash, not a number)."""
    if table.lookup(word.partition("=")[0]) is not None:
        return True
    return table.argparse and _is_option_word(word)


def _values_after(option: Option, words: Sequence[str], index: int, inline: bool) -> int:
    """How many words after a refused option are its values (skipped: one problem, not two)."""
    if inline or option.values == 0:
        return 0
    limit = option.values if isinstance(option.values, int) else len(words)
    count = 0
    while count < limit and index + count < len(words):
        if _is_option_word(words[index + count]):
            break
        count += 1
        if option.values == "?":
            break
    return count


def parse_extra_args(
    words: Sequence[str],
    table: OptionTable,
    owned: Mapping[Option, Location],
    refused: Mapping[str, str],
) -> tuple[list[ExtraArg], list[Problem]]:
    """The extra words read as the server's parser reads them, and their problems (located at
    the word's index; messages reference the input that owns an option with `ref`)."""
    parsed: list[ExtraArg] = []
    problems: list[Problem] = []
    index = 0
    software = table.software
    while index < len(words):
        word = words[index]
        here: tuple[int] = (index,)
        index += 1
        if not _is_option_word(word):
            problems.append(
                (here, f"{shown(word)} is not an option of {software}: each value follows its "
                       "option (the rendered flags come first)")
            )  # fmt: skip
            continue
        spelling, equals, inline = word.partition("=")
        dotted = ""
        if table.argparse and spelling.startswith("--") and "." in spelling:
            spelling, _, dotted = spelling.partition(".")
        option = table.lookup(spelling)
        if option is None:
            matches = table.abbreviated(spelling)
            if len(matches) == 1:
                full = matches[0]
                where = owned.get(full)
                tail = f", which {ref(*where)} sets" if where is not None else ""
                problems.append(
                    (here, f"{shown(spelling)} abbreviates {full.name}{tail}: write options in "
                           "full")
                )  # fmt: skip
            else:
                near = table.nearest(spelling)
                hint = f" (did you mean {near}?)" if near else ""
                problems.append((here, f"{shown(spelling)} is not an option of {software}{hint}"))
            if not equals and index < len(words) and not _is_option_word(words[index]):
                index += 1  # its would-be value: one problem, not two
            continue
        where = owned.get(option)
        if where is not None:
            written = word if equals or dotted else spelling
            what = shown(written) + ("" if written == option.name else f" ({option.name})")
            problems.append((here, f"{what} is rendered from {ref(*where)}: set that instead"))
            index += _values_after(option, words, index, bool(equals))
            continue
        reason = next((refused[n] for n in option.names if n in refused), None)
        if reason is not None:
            problems.append((here, f"{shown(spelling)} is refused: {reason}"))
            index += _values_after(option, words, index, bool(equals))
            continue
        if equals and not table.argparse:
            problems.append(
                (here, f"{shown(word)}: {software} reads no --flag=value; write "
                       f"{shown(spelling)} and {shown(inline)} as two words")
            )  # fmt: skip
            continue
        if dotted and option.values != 1:
            problems.append((here, f"{shown(word)}: {option.name} takes no JSON keys"))
            continue
        values: list[str] = [inline] if equals else []
        wanted = option.values
        if equals and wanted == 0:
            problems.append((here, f"{shown(word)}: {option.name} takes no value"))
            continue
        if (wanted in (1, 2) and not equals) or wanted == 2:
            count = int(wanted) - len(values)
            taken = list(words[index : index + count])
            # llama.cpp takes the next word whatever it is; a known option there is a mistake.
            if len(taken) < count or any(_not_a_value(table, w) for w in taken):
                hint = f" ({option.hint})" if option.hint else ""
                if any(_not_a_value(table, w) for w in taken):
                    follows = "an option follows"
                else:
                    follows = f"only {len(taken)} follow" if taken else "none follows"
                problems.append(
                    (here, f"{shown(spelling)} takes {count} value{'s' if count > 1 else ''}"
                           f"{hint} and {follows}")
                )  # fmt: skip
                index += len([w for w in taken if not _not_a_value(table, w)])
                continue
            values += taken
            index += count
        elif wanted in ("+", "*", "?") and not equals:
            while index < len(words) and not _is_option_word(words[index]):
                values.append(words[index])
                index += 1
                if wanted == "?":
                    break
            if wanted == "+" and not values:
                problems.append((here, f"{shown(spelling)} takes one or more values, none follows"))
                continue
        if option.choices is not None:
            bad = [v for v in values if v not in option.choices]
            if bad:
                problems.append(
                    (here, f"{shown(bad[0])} is not a choice of {option.name} "
                           f"({', '.join(option.choices)})")
                )  # fmt: skip
                continue
        parsed.append(ExtraArg(index=here[0], spelling=spelling, option=option,
                               values=tuple(values)))  # fmt: skip
    return parsed, problems


def located(problems: list[Problem], key: str) -> list[Problem]:
    """Problems of `parse_extra_args` under the input that holds the words."""
    return [((key, *where), message) for where, message in problems]
