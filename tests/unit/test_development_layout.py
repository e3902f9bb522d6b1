"""docs/development.md's layout and guides stay true: what the layout names exists, it names
every package, and every file a guide (`## Adding a target`, ...) names exists.

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
GUIDES = ("Adding a target", "Adding a llama-server flag", "Adding a component")
"""The contributor guides: each a section of numbered steps, one file each."""
MOST_TARGET_FILES = 5
"""What adding a target may take (a target is one module over its wiring, its stack model in the
`StackConfig` union, and an example stack)."""
MOST_FLAG_FILES = 2
"""What adding a llama-server flag may take: the component's flag and the stack's key (the
target and the keys of refusals follow from the key's name)."""
_STEP = re.compile(r"^\d+\. `([^`]+)`", re.MULTILINE)
_PATH = re.compile(r"`([\w.<>-]+(?:/[\w.<>-]+)+/?)`")
_PLACEHOLDER = re.compile(r"<[^>]+>")


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


def guide(text: str, title: str) -> str:
    """The text of the section `## {title}`, up to the next section."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def guide_steps(section: str) -> list[str]:
    """The file each numbered step of a guide starts with."""
    return _STEP.findall(section)


def named_paths(section: str) -> list[str]:
    """Every path a guide names in backticks (a word with a slash; `<kind>` a placeholder)."""
    return _PATH.findall(section)


def path_exists(path: str) -> bool:
    """Whether the path exists; one with placeholders, whether any file fits it."""
    if _PLACEHOLDER.search(path):
        return any(ROOT.glob(_PLACEHOLDER.sub("*", path)))
    return (ROOT / path).exists()


def test_every_file_the_guides_name_exists() -> None:
    text = DEVELOPMENT.read_text()
    missing = [
        f"## {title}: {path}"
        for title in GUIDES
        for path in named_paths(guide(text, title))
        if not path_exists(path)
    ]
    assert missing == [], f"the guides name what does not exist: {missing}"


def test_each_guide_is_steps_that_each_name_the_file_they_touch() -> None:
    text = DEVELOPMENT.read_text()
    for title in GUIDES:
        steps = guide_steps(guide(text, title))
        assert steps, f"## {title}: no numbered steps"
        assert len(set(steps)) == len(steps), f"## {title}: a file in two steps: {steps}"
        assert all(step in named_paths(guide(text, title)) for step in steps), steps


def test_adding_a_target_takes_at_most_five_files() -> None:
    steps = guide_steps(guide(DEVELOPMENT.read_text(), "Adding a target"))
    assert len(steps) <= MOST_TARGET_FILES, steps
    assert "infra/targets/<kind>_target.py" in steps


def test_adding_a_llama_server_flag_takes_at_most_two_files() -> None:
    steps = guide_steps(guide(DEVELOPMENT.read_text(), "Adding a llama-server flag"))
    assert len(steps) <= MOST_FLAG_FILES, steps


def test_the_guide_reader_finds_steps_paths_and_placeholders() -> None:
    section = (
        "1. `infra/targets/<kind>_target.py` (as `infra/lock.py`): `flags.<field>`, "
        "`llm-infra docs STACK`\n2. `docs/no-such.md`: text\n"
    )
    assert guide_steps(section) == ["infra/targets/<kind>_target.py", "docs/no-such.md"]
    assert named_paths(section) == [
        "infra/targets/<kind>_target.py",
        "infra/lock.py",
        "docs/no-such.md",
    ]
    assert path_exists("infra/targets/<kind>_target.py")
    assert not path_exists("infra/targets/<kind>_no_such.py")
    assert not path_exists("docs/no-such.md")
