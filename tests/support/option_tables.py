"""Regenerate the servers' option tables (`components/*/..._options.json`) from the pinned software.

`llama_server_table(help_text)` reads llama-server b11434's own `--help` (every spelling of each
option, negative forms included, and its value hint); `vllm_serve_table()` runs inside the vLLM
venv and reads vLLM 0.33's own `vllm serve` parser (`tests/support/vllm_parse_args.py`'s
parser). The contract tests regenerate both and compare them with the committed files;
`python -m tests.support.option_tables llama|vllm` rewrites a file after an upgrade.

llama-server's help prints each option as `-c,    --ctx-size N` in the first 40 columns (or
alone on its line when longer, the help below), the spellings joined by `, ` and the value
hint after a space. An option whose handler takes two values prints two hints
(`--control-vector-layer-range START END`); a hint of one value may hold spaces
(`<tensor name pattern>=<buffer type>,...`): two upper-case words are two values.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

_SPELLING = re.compile(r"-[^\s,]+")
_TWO_VALUES = re.compile(r"[A-Z_]+ [A-Z_]+")
HELP_COLUMN = 40
REPO = Path(__file__).resolve().parents[2]
# The committed tables (components.extra_args reads them); this module imports no project code,
# so the vLLM venv runs it as it is.
LLAMA_SERVER_TABLE = REPO / "components" / "llamacpp" / "llama_server_options.json"
VLLM_SERVE_TABLE = REPO / "components" / "vllm" / "vllm_serve_options.json"


def _spec(line: str) -> str:
    """The option part of a help line: the first 40 columns, or the whole line when longer."""
    if len(line) > HELP_COLUMN and line[HELP_COLUMN - 3 : HELP_COLUMN] == "   ":
        return line[:HELP_COLUMN].rstrip()
    return line.rstrip()


def parse_spec(spec: str) -> dict[str, Any]:
    """One option from its help spec: `-ngl,  --gpu-layers, --n-gpu-layers N`."""
    names: list[str] = []
    rest = spec
    while True:
        match = _SPELLING.match(rest)
        if match is None:
            raise ValueError(f"no option spelling at {rest!r} in {spec!r}")
        names.append(match[0])
        rest = rest[match.end() :]
        if rest.startswith(","):
            rest = rest[1:].lstrip(" ")
            continue
        break
    hint = rest.strip() or None
    values = 0 if hint is None else 2 if _TWO_VALUES.fullmatch(hint) else 1
    return {"names": names, "values": values, "hint": hint}


def llama_server_table(help_text: str) -> dict[str, Any]:
    """The option table of `llama-server --help`'s text."""
    options = []
    for line in help_text.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            options.append(parse_spec(_spec(line)))
    return {"software": "llama-server b11434", "source": "llama-server --help", "options": options}


def llama_server_help(binary: str) -> str:
    """`llama-server --help` of a binary."""
    result = subprocess.run(
        [binary, "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


def _nargs(nargs: Any) -> int | str:
    if nargs is None:
        return 1
    return nargs if isinstance(nargs, int | str) else 1


def vllm_serve_table() -> dict[str, Any]:
    """The option table of vLLM 0.33's `vllm serve` parser (run in the vLLM venv)."""
    import os

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    # Every spelling the parser accepts, hidden ones too (`--no-enable-prefix-caching`).
    spellings: dict[int, list[str]] = {}
    for spelling, action in parser._option_string_actions.items():
        spellings.setdefault(id(action), []).append(spelling)
    # The config each option belongs to (`CacheConfig`, `Frontend`, ...): what the plan reads.
    groups = {id(a): g.title for g in parser._action_groups for a in g._group_actions}
    options = []
    for action in parser._actions:
        if not action.option_strings:
            continue  # the positional model
        names = list(action.option_strings)
        names += sorted(set(spellings.get(id(action), [])) - set(names))
        choices = None
        if action.choices is not None:
            choices = sorted(str(choice) for choice in action.choices)
        options.append(
            {"names": names, "values": _nargs(action.nargs), "choices": choices,
             "group": groups.get(id(action))}
        )  # fmt: skip
    return {
        "software": "vllm serve 0.33.0",
        "source": "vllm.entrypoints.common.cli_args.make_arg_parser",
        "options": options,
    }


def table_text(table: dict[str, Any]) -> str:
    """A table as the committed file holds it: one option per line, for readable diffs."""
    lines = [json.dumps(option, separators=(", ", ": ")) for option in table["options"]]
    head = {key: value for key, value in table.items() if key != "options"}
    body = ",\n    ".join(lines)
    return (
        "{\n"
        + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items())
        + f'  "options": [\n    {body}\n  ]\n}}\n'
    )


def main(argv: list[str]) -> int:
    """`llama [BINARY]` or `vllm`: rewrite that committed table (`--stdout`: print it)."""
    stdout = "--stdout" in argv
    argv = [a for a in argv if a != "--stdout"]
    if argv[:1] == ["vllm"]:
        path, text = VLLM_SERVE_TABLE, table_text(vllm_serve_table())
    elif argv[:1] == ["llama"]:
        from tests.support.llama_server import llama_server_binary

        binary = argv[1] if len(argv) > 1 else llama_server_binary()
        path, text = LLAMA_SERVER_TABLE, table_text(llama_server_table(llama_server_help(binary)))
    else:
        print("usage: python -m tests.support.option_tables llama [BINARY] | vllm [--stdout]",
              file=sys.stderr)  # fmt: skip
        return 2
    if stdout:
        sys.stdout.write(text)
    else:
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
