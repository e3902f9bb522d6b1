"""No module of the package over ~400 lines without a one-line reason at its top (STYLE.md).

A shipped payload is the exception: its bytes are what a stock image runs and they name the
content-addressed ConfigMap every stack renders, so a comment added to it would change every
rendered stack. Its reason is kept here instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT

LIMIT = 400
REASON = "~400 lines"
HEAD_LINES = 15
PACKAGES = ("components", "infra", "policy", "provider")

SHIPPED = {
    "components/payloads/fetcher.py": (
        "one stdlib file (beside http_policy.py) in the fetch Job's ConfigMap and on the MI300X "
        "host; a split renames the ConfigMap of every stack"
    ),
    "components/payloads/http_policy.py": (
        "the one client policy (limits, redirects, retries, deadlines) shipped verbatim beside "
        "fetcher.py and verify.py"
    ),
}


def modules() -> list[Path]:
    """Every Python module of the package's top-level folders."""
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def line_count(path: Path) -> int:
    """The module's lines."""
    return len(path.read_text().splitlines())


def test_a_long_module_says_why_at_its_top() -> None:
    """Over the limit, a module's first lines say why, or it is a shipped payload with a reason
    above."""
    silent = []
    for path in modules():
        name = path.relative_to(ROOT).as_posix()
        if line_count(path) <= LIMIT or name in SHIPPED:
            continue
        if not any(REASON in line for line in path.read_text().splitlines()[:HEAD_LINES]):
            silent.append(f"{name} ({line_count(path)} lines)")
    assert not silent, (
        f"over {LIMIT} lines with no '{REASON}' reason in the first {HEAD_LINES} lines (split "
        f"by concern, or say why it stays one file): {', '.join(silent)}"
    )


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_exception_is_still_long_and_shipped(name: str) -> None:
    """An exception that no longer applies goes: the payload is still over the limit and still
    shipped from components/payloads."""
    path = ROOT / name
    assert path.parent == ROOT / "components" / "payloads", f"{name} is not a shipped payload"
    assert line_count(path) > LIMIT, f"{name} is back under {LIMIT} lines: drop its exception"
