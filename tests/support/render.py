"""`llm-infra render` for tests: a stack rendered into a directory, and the stacks tests render."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.support.cli import run_cli

STACK_FILE = ROOT / "stacks" / "Pulumi.strix-halo.yaml"
FLEET_STACKS = ["strix-halo-pair", "strix-halo-pair-split"]
"""The example stacks of several servers and of a split model."""
COMMITTED_STACKS = sorted(
    path.name[len("Pulumi.") : -len(".yaml")] for path in (ROOT / "stacks").glob("Pulumi.*.yaml")
)
"""Every committed stack (`stacks/Pulumi.STACK.yaml`): each has a golden render and a reference
page, a new target's example stack included without a list to extend."""


def render(
    stack: str, out: Path, cwd: Path = ROOT, seed: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`llm-infra render STACK --out OUT` in this process; with ``seed``, in a fresh interpreter
    whose PYTHONHASHSEED is ``seed`` (what a render must not depend on)."""
    argv = ["render", stack, "--out", str(out)]
    if seed is None:
        return run_cli(argv, cwd=cwd)
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": seed},
        check=False,
    )


def rendered_stack(stack: str, parent: Path) -> Path:
    """STACK rendered into PARENT/STACK, a render that must succeed: that directory."""
    out = parent / stack
    result = render(stack, out)
    assert result.returncode == 0, result.stderr
    return out
