"""docs/development.md's layout stays true: what it names exists, and it names every package.

The layout is the code block under `## Layout`. A line that starts at column 0 or 2 opens an
entry: its first word is a path (`infra/`, `  lock.py`), from the root at column 0 and from the
last column-0 directory at column 2. In an entry's text, a word that ends in `.py` or `.sh` is
a file (`vllm/bundle.py` under `components/`) and a snake_case word a module or package
(`log_growth` under `bench/`), both read from the entry's directory.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

DEVELOPMENT = ROOT / "docs" / "development.md"
DOCUMENTED_PACKAGES = ("components", "infra")
"""Every package under these is an entry of the layout."""
_FILE_WORD = re.compile(r"(?<![\w./<>-])\w[\w/]*\.(?:py|sh)\b")
_MODULE_WORD = re.compile(r"(?<![\w./*<>-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w./-])")


def layout_lines(text: str) -> list[str]:
    """The lines of the code block under `## Layout`."""
    section = text.split("\n## Layout\n", 1)[1]
    block = section.split("```\n", 2)[1]
    return block.splitlines()


def layout_paths(lines: list[str]) -> tuple[list[Path], list[Path]]:
    """The entries' paths and the files their texts name, relative to the root."""
    entries: list[Path] = []
    named: list[Path] = []
    top = Path()
    here = Path()
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        words = line.split()
        text = line
        if indent in (0, 2) and words:
            path = Path(words[0]) if indent == 0 else top / words[0]
            if indent == 0:
                top = path
            entries.append(path)
            here = path if words[0].endswith("/") else path.parent
            text = line[indent + len(words[0]) :]
        named += [here / word for word in _FILE_WORD.findall(text)]
        named += [here / f"{word}.py" for word in _MODULE_WORD.findall(_FILE_WORD.sub("", text))]
    return entries, named


def packages(root: Path) -> list[Path]:
    return sorted(
        init.parent.relative_to(ROOT)
        for name in DOCUMENTED_PACKAGES
        for init in (root / name).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


def test_every_path_the_layout_names_exists() -> None:
    entries, named = layout_paths(layout_lines(DEVELOPMENT.read_text()))
    missing = [
        str(p)
        for p in entries + named
        if not (ROOT / p).exists() and not (ROOT / p.with_suffix("")).is_dir()
    ]
    assert missing == [], f"docs/development.md's layout names what does not exist: {missing}"


def test_the_layout_names_every_package_of_components_and_infra() -> None:
    entries, _ = layout_paths(layout_lines(DEVELOPMENT.read_text()))
    unnamed = [str(p) for p in packages(ROOT) if p not in entries]
    assert unnamed == [], f"docs/development.md's layout has no entry for {unnamed}"
