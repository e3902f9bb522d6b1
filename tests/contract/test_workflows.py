"""GitHub workflows: actionlint accepts them; the preview posts what `llm-infra diff` prints."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cli import diff

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
# The venv's tools (actionlint, and shellcheck, which actionlint runs on every `run:` script).
BIN = Path(sys.executable).parent


def actionlint(*paths: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run the actionlint of this venv on the given workflow files."""
    tool = shutil.which("actionlint", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    assert tool, "actionlint is not installed (pip install it into the venv: see pyproject)"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [tool, "-no-color", *map(str, paths)], cwd=cwd, env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def load(name: str) -> dict[Any, Any]:
    """A workflow as YAML (note: PyYAML reads the `on:` key as True)."""
    document: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return document


def test_actionlint_accepts_both_workflows() -> None:
    assert shutil.which("shellcheck", path=str(BIN)), "shellcheck must be there to lint run: steps"
    result = actionlint(WORKFLOWS / "preview.yml", WORKFLOWS / "test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        ("needs: render-diff", "needs: render-dif", 'job "render-dif" which does not exist'),
        ("comment-on-pr: true", "comment-on-pull-request: true", '"comment-on-pull-request"'),
        ('echo "changed=${changed# }"', "echo changed=$changed", "SC2086"),
        ("needs.pulumi-token.outputs.configured", "needs.pulumi-token.outputs.present", "present"),
    ],
    ids=["unknown-job", "unknown-action-input", "shellcheck", "unknown-job-output"],
)
def test_actionlint_rejects_a_broken_copy(
    tmp_path: Path, old: str, new: str, complaint: str
) -> None:
    text = (WORKFLOWS / "preview.yml").read_text()
    assert old in text
    broken = tmp_path / ".github" / "workflows" / "preview.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(old, new, 1))
    result = actionlint(broken, cwd=tmp_path)
    assert result.returncode == 1
    assert complaint in result.stdout, result.stdout


def test_every_action_is_pinned_to_a_version_tag() -> None:
    for name in ("preview.yml", "test.yml"):
        uses = re.findall(r"uses:\s*(\S+)", (WORKFLOWS / name).read_text())
        assert uses
        for action in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})", action), action


def test_test_workflow_runs_ci_on_main_and_pull_requests() -> None:
    workflow = load("test.yml")
    assert workflow[True]["push"]["branches"] == ["main"]
    assert "pull_request" in workflow[True]
    runs = [step.get("run") for step in workflow["jobs"]["test"]["steps"]]
    assert "bash .ci/run" in runs


def test_preview_comments_with_a_write_token_only_in_jobs_that_run_no_pr_code() -> None:
    workflow = load("preview.yml")
    assert set(workflow[True]) == {"pull_request"}
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    assert "permissions" not in jobs["render-diff"]
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    assert [s.get("uses", "").split("@")[0] for s in jobs["comment"]["steps"]] == [
        "actions/download-artifact",
        "actions/github-script",
    ]


def test_pulumi_preview_runs_only_with_a_token_per_stack_with_pr_comments() -> None:
    jobs = load("preview.yml")["jobs"]
    gate = jobs["pulumi-token"]["steps"][0]
    assert gate["env"] == {"PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}
    preview = jobs["pulumi-preview"]
    assert preview["if"] == "needs.pulumi-token.outputs.configured == 'true'"
    assert preview["strategy"]["matrix"]["stack"] == ["strix-halo", "mi300x"]
    (step,) = [s for s in preview["steps"] if s.get("uses", "").startswith("pulumi/actions@")]
    assert step["with"]["command"] == "preview"
    assert step["with"]["diff"] is True
    assert step["with"]["comment-on-pr"] is True


def run_steps(names: list[str], workdir: Path, env: dict[str, str]) -> None:
    """Run the named `run:` steps of the render-diff job as GitHub does (bash -eo pipefail)."""
    steps = {s.get("name"): s for s in load("preview.yml")["jobs"]["render-diff"]["steps"]}
    for name in names:
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", steps[name]["run"]],
            cwd=workdir, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


def checkout(target: Path) -> Path:
    """A clone of this repository's HEAD with a `.venv/bin/llm-infra` that runs its own code."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    tool = target / ".venv" / "bin" / "llm-infra"
    tool.parent.mkdir(parents=True)
    # Stands in for `pip install -e .` of that checkout: the clone's code, this venv's packages.
    tool.write_text(f'#!/bin/sh\nPYTHONPATH="{target}" exec "{sys.executable}" -m infra.cli "$@"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return target


def test_the_render_diff_covers_every_stack_file() -> None:
    stacks = sorted(
        p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")
    )
    assert sorted(load("preview.yml")["env"]["STACKS"].split()) == stacks


def test_preview_steps_post_exactly_what_llm_infra_diff_prints(tmp_path: Path) -> None:
    work = tmp_path / "workspace"
    work.mkdir()
    checkout(work / "base")
    head = checkout(work / "head")
    stack_file = head / "stacks/Pulumi.strix-halo.yaml"
    stack_file.write_text(stack_file.read_text().replace("gpuLayers: 40", "gpuLayers: 42"))
    runner_temp = tmp_path / "runner"
    runner_temp.mkdir()
    outputs, summary = tmp_path / "outputs", tmp_path / "summary.md"
    env = {
        **os.environ,
        "STACKS": load("preview.yml")["env"]["STACKS"],
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
        "RUN_URL": "https://example.invalid/run",
    }
    run_steps(["Render every stack on each side", "Diff the renders"], work, env)
    assert outputs.read_text() == "changed=strix-halo\n"
    run_steps(["Write the job summary and the comment"], work, {**env, "CHANGED": "strix-halo"})

    posted = (work / "render-diff" / "strix-halo.diff").read_text()
    status, printed = diff.stack_diff("strix-halo", "HEAD", start=head, cache=False)
    assert status == 1
    assert posted == printed
    for other in ("mi300x", "strix-halo-pair", "strix-halo-pair-split"):
        assert (work / "render-diff" / f"{other}.diff").read_text() == ""
    comment = (work / "render-diff" / "comment.md").read_text()
    assert comment.startswith("<!-- llm-infra-render-diff -->\n")
    assert "-        - '40'\n+        - '42'\n" in comment
    # The per-resource summary stands above the collapsed diff.
    line = "Deployment llm/deepseek-v4-flash-0731: update (pod restart, model reload)\n"
    assert comment.index(line) < comment.index("<details>")
    assert "<code>mi300x</code>: unchanged" in comment
    assert summary.read_text() == comment
