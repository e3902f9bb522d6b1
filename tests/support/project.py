"""A project of its own in a temporary directory, and `llm-infra` run in it as a user would.

The directory holds a `Pulumi.yaml` naming the llm-infra project, so a stack name means its
`stacks/Pulumi.NAME.yaml` (nothing is written into the checkout); the commands run in the test's
process (`tests.support.cli.run_cli`), with HF_ENDPOINT at the hub a test gives (unset
otherwise, as are HF_TOKEN and an offline switch, so nothing leaves the machine).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import ROOT
from tests.support.cli import run_cli

PULUMI_YAML = "name: llm-infra\nruntime: python\n"


def new_project(directory: Path) -> Path:
    """A directory that `llm-infra` takes for a checkout (its `stacks/` starts empty)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Pulumi.yaml").write_text(PULUMI_YAML)
    return directory


def project_env(endpoint: str | None = None) -> dict[str, str]:
    """The environment of a command run in a project: this checkout's code, no token, the hub
    at `endpoint` (none: HF_ENDPOINT unset)."""
    unset = ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT", "LLM_INFRA_PROJECT")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPATH"] = str(ROOT)
    env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    if endpoint is not None:
        env["HF_ENDPOINT"] = endpoint
    return env


def llm_infra(
    project: Path, *args: str, endpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`llm-infra ARGS` in the project."""
    return run_cli(list(args), cwd=project, env=project_env(endpoint))
