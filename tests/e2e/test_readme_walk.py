"""The "another model" walk (docs/new-model.md, linked from the README), run exactly as written
against the stand-in hub.

The commands are taken from the page, run one after another in one bash in a
project of its own (a temporary directory with the project's Pulumi.yaml, so `stacks/` is its
own), with `llm-infra` on PATH running this checkout's code, and each step's exit status and
result checked: the header-only sample, the hub it starts in the background (stopped by the
walk's last line, or here if the walk fails before it), the stack and lock `init` writes, the
lock found current, the plan's verdict, the rendered server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.support.project import new_project, project_env

PAGE = ROOT / "docs" / "new-model.md"
TITLE = "# Another model: init, lock, plan, render"
STEP = "@@step"


def walk_page() -> str:
    """The walk's page, as the README links to it."""
    assert f"]({PAGE.relative_to(ROOT)})" in (ROOT / "README.md").read_text(), "README links it"
    page = PAGE.read_text()
    assert page.startswith(TITLE + "\n"), f"{PAGE.name} starts with {TITLE!r}"
    return page


def walk_commands() -> list[str]:
    """The commands of the walk: the first `sh` block of its page."""
    block = re.search(r"```sh\n(.*?)```", walk_page(), re.S)
    assert block, "the walk's sh block"
    lines = [line for line in block[1].splitlines() if line.strip()]
    return [line for line in lines if not line.lstrip().startswith("#")]


def walk_text() -> str:
    """The walk's prose, whitespace collapsed (what it says each step prints)."""
    return " ".join(walk_page().split("\n## ", 1)[0].split())


def run_walk(project: Path, commands: list[str]) -> tuple[list[tuple[int, str, str]], str]:
    """Run the commands in one bash, as written; each step's (status, stdout, stderr), and the
    hub's pid if one was started."""
    script = ["set +e"]
    for index, command in enumerate(commands):
        script += [
            command,
            f'rc=$?; echo "{STEP} {index} $rc"; echo "{STEP} {index} $rc" >&2',
        ]
    script.append('echo "@@pid ${LLM_INFRA_HUB_PID:-}"')
    shim = project / "bin" / "llm-infra"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m infra.cli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = project_env()
    env["PATH"] = f"{shim.parent}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=project, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip

    def split(text: str) -> list[tuple[int, str]]:
        parts, rest = [], text
        for index in range(len(commands)):
            found = re.search(rf"^{STEP} {index} (\d+)$", rest, re.M)
            if found is None:
                break
            parts.append((int(found[1]), rest[: found.start()]))
            rest = rest[found.end() :].removeprefix("\n")
        return parts

    outs, errs = split(result.stdout), split(result.stderr)
    steps = [(rc, out, err) for (rc, out), (_, err) in zip(outs, errs, strict=False)]
    pid = re.search(r"^@@pid (\d*)$", result.stdout, re.M)
    return steps, pid[1] if pid else ""


def _is_running(pid: int, wait: float = 5.0) -> bool:
    """Whether the process still runs after up to `wait` seconds (a zombie has ended)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state == "Z" or time.monotonic() > deadline:
            return state != "Z"
        time.sleep(0.1)


def test_the_readme_walk_runs_as_written(tmp_path: Path) -> None:
    commands = walk_commands()
    prose = walk_text()
    project = new_project(tmp_path / "walk")
    steps, pid = run_walk(project, commands)
    try:
        assert len(steps) == len(commands), f"the walk stopped: {steps[-1:]}"
        checks = _checks(project, prose)
        for command, (rc, out, err) in zip(commands, steps, strict=True):
            assert rc == 0, f"{command!r} exited {rc}:\n{out}\n{err}"
            check = next((c for pattern, c in checks.items() if re.search(pattern, command)), None)
            assert check is not None, f"the test has no check for the walk's {command!r}"
            check(out, err)
        # The walk's last line stopped the hub it started.
        assert pid and not _is_running(int(pid))
    finally:
        if pid and _is_running(int(pid), wait=0):
            os.kill(int(pid), signal.SIGTERM)


def _checks(project: Path, prose: str) -> dict[str, Callable[[str, str], None]]:
    stacks = project / "stacks"

    def sample(out: str, err: str) -> None:
        assert re.match(r"wrote demo-hub/\S+\.gguf: 17\.\d\d GiB", out), out
        gguf = next((project / "demo-hub").rglob("*.gguf"))
        assert gguf.stat().st_blocks * 512 < 16 * 2**20  # the header only

    def serve(out: str, err: str) -> None:
        assert "serves demo-hub at http://127.0.0.1:" in err, err

    def init(out: str, err: str) -> None:
        assert out.startswith("wrote stacks/Pulumi.qwen3.yaml and stacks/qwen3.lock.json"), out
        reported = re.search(r"-ngl \d+ of \d+, context \d+ \(1 slot of \d+ tokens\) in [\d.]+ "
                             r"GiB of GPU memory", out)  # fmt: skip
        assert reported and reported[0] in prose, f"the walk quotes init's report: {out}"
        document = yaml.safe_load((stacks / "Pulumi.qwen3.yaml").read_text())
        model = document["config"]["llm-infra:model"]
        assert set(model) == {"repo", "revision", "files"}

    def lock(out: str, err: str) -> None:
        assert "(unchanged)" in out and "`lock` finds its lock `(unchanged)`" in prose

    def plan(out: str, err: str) -> None:
        assert out.startswith("verdict: fits") and "`plan` says `verdict: fits`" in prose

    def render(out: str, err: str) -> None:
        resources = json.loads((project / "rendered" / "qwen3" / "resources.json").read_text())
        deployment = next(r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment")
        args = deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:2] == ["-m", "/models/Qwen3-30B-A3B-Q4_K_M.gguf"]
        assert "--alias" in args and args[args.index("--alias") + 1] == "qwen3-30b-a3b"

    def stop(out: str, err: str) -> None:
        assert out == "" and err == ""

    return {
        r"^llm-infra hub sample ": sample,
        r"^eval .*llm-infra hub serve .*--detach": serve,
        r"^llm-infra init ": init,
        r"^llm-infra lock ": lock,
        r"^llm-infra plan ": plan,
        r"^llm-infra render ": render,
        r"^kill ": stop,
    }
