"""The reference's flag tables: each flag's meaning, read from its field docstring."""

import ast
import inspect
import itertools
import re
import textwrap

_FLAG_DOC = re.compile(r"^`(-[-\w]+)`(?: \((?:or|and) `(-[-\w]+)`\))?: (.+)$")


def flag_meanings(*types: type) -> dict[str, str]:
    """Flag → meaning, read from the field docstrings of the builders' flag types.

    The docstring of each field (`` `-ngl`: GPU layers. ...``) is the one place a flag is
    explained: the component schema shows it, and this reference quotes it.
    """
    meanings: dict[str, str] = {}
    for cls in types:
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in itertools.pairwise(body.body):
            if not (
                isinstance(node, ast.AnnAssign)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                continue
            match = _FLAG_DOC.match(" ".join(after.value.value.split()))
            if match is None:
                continue
            text = match[3]
            # Sentence case, but a name such as vLLM keeps its own.
            meaning = text[0].upper() + text[1:] if text[1:2].islower() else text
            for flag in (match[1], match[2]):
                if flag:
                    meanings[flag] = meaning
    return meanings


def flag_rows(argv: list[str], meanings: dict[str, str]) -> list[str]:
    """A Markdown table of an argv: each flag, its value and its meaning."""
    rows = ["| Flag | Value | Meaning |", "|------|-------|---------|"]
    index = 0
    while index < len(argv):
        flag = argv[index]
        value = ""
        if (
            index + 1 < len(argv)
            and not argv[index + 1].startswith("--")
            and (not argv[index + 1].startswith("-") or argv[index + 1][1:2].isdigit())
        ):
            value = argv[index + 1]
            index += 1
        shown = code(value) if value else "*(flag)*"
        rows.append(f"| {code(flag)} | {shown} | {meanings.get(flag, '')} |")
        index += 1
    return rows


def code(text: str) -> str:
    """Text as a Markdown table's code span (an extra argument may hold `|` or a backtick)."""
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


_ABOUT_AN_ARCHITECTURE = re.compile(r" \(([a-z][a-z0-9_-]*) needs [^()]*\)")


def for_architecture(meanings: dict[str, str], architecture: str) -> dict[str, str]:
    """The meanings as they hold for a model of this architecture: a remark about what another
    architecture needs (`(deepseek4 needs K = V)`) is left out."""

    def kept(match: re.Match[str]) -> str:
        return match[0] if match[1] == architecture else ""

    return {flag: _ABOUT_AN_ARCHITECTURE.sub(kept, text) for flag, text in meanings.items()}


def extra_meanings(meanings: dict[str, str], words: list[str], key: str) -> dict[str, str]:
    """The flag meanings, with each extra argument's option explained as one."""
    extra = {w: f"Passed as given (`{key}`)." for w in words if w.startswith("-")}
    return {**extra, **meanings}
