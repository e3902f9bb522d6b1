"""What the README and the docs pages it links quote of the program is what the program does."""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path

import yaml

from tests.conftest import ROOT, STACKS
from tests.support.cli import run_cli

README = (ROOT / "README.md").read_text()
DEPLOY = ROOT / "docs" / "deploy.md"


def test_every_page_the_readme_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert "docs/deploy.md" in links and "docs/development.md" in links
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert missing == []


def test_the_readme_first_screen_renders_a_stack_and_runs_the_whole_suite() -> None:
    first = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first, "the README's first sh block"
    commands = [line for line in first[1].splitlines() if line and not line.startswith("#")]
    assert commands[-1] == "bash .ci/run"
    *_, render = commands[0].split(" && ")
    argv = shlex.split(render)
    assert argv[:2] == [".venv/bin/llm-infra", "render"]
    assert (STACKS / f"Pulumi.{argv[2]}.yaml").is_file()
    run = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/setup" in run and 'bash .ci/test "$@"' in run


def test_the_readme_inner_loop_is_what_ci_runs_less_the_contract_tier() -> None:
    loop = re.search(r"```sh\n\. \.venv/bin/activate\n(.+)\n```", README)
    assert loop, "the README's inner-loop block"
    steps = loop[1].split(" && ")
    assert steps == [
        "ruff check .", "ruff format --check .", "mypy", 'pytest -m "not contract" -n 4',
    ]  # fmt: skip
    test = (ROOT / ".ci" / "test").read_text()
    for step in steps[:3]:
        assert f"\n{step}\n" in test, step
    assert '\npython -m pytest -n auto "$@"' in test
    # Both take whole files per worker (module fixtures start once) from the same addopts.
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--dist loadfile" in addopts["addopts"]


def test_the_example_error_in_the_deploy_page_is_what_render_prints(tmp_path: Path) -> None:
    page = DEPLOY.read_text()
    intro = re.search(
        r"With\s+`(\S+)` a copy of `(\S+)` that sets (.+?):\n\n```console\n", page, re.S
    )
    assert intro, "the deploy page's example error and the stack it comes from"
    name, base, settings = intro[1], intro[2], intro[3]
    command, *expected = page[intro.end() :].split("```", 1)[0].splitlines()
    assert command == f"$ llm-infra render {name}"
    document = yaml.safe_load((STACKS / f"Pulumi.{base}.yaml").read_text())
    edits = re.findall(r"`(\w+)\.(\w+): ([^`]+)`", settings)
    assert edits
    for section, key, value in edits:
        document["config"][f"llm-infra:{section}"][key] = yaml.safe_load(value)
    # A project of its own, so the stack is found by name as on the page.
    (tmp_path / "Pulumi.yaml").write_text("name: llm-infra\nruntime: python\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document))
    env = {k: v for k, v in os.environ.items() if k != "LLM_INFRA_PROJECT"}
    result = run_cli(["render", name], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == expected
