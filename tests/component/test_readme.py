"""What the README quotes of the program is what the program prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT, STACKS

README = (ROOT / "README.md").read_text()


def test_the_readme_example_error_is_what_render_prints(tmp_path: Path) -> None:
    intro = re.search(
        r"With\s+`(\S+)` a copy of `(\S+)` that sets (.+?):\n\n```console\n", README, re.S
    )
    assert intro, "the README's example error and the stack it comes from"
    name, base, settings = intro[1], intro[2], intro[3]
    command, *expected = README[intro.end() :].split("```", 1)[0].splitlines()
    assert command == f"$ llm-infra render {name}"
    document = yaml.safe_load((STACKS / f"Pulumi.{base}.yaml").read_text())
    edits = re.findall(r"`(\w+)\.(\w+): ([^`]+)`", settings)
    assert edits
    for section, key, value in edits:
        document["config"][f"llm-infra:{section}"][key] = yaml.safe_load(value)
    # A project of its own, so the stack is found by name as in the README.
    (tmp_path / "Pulumi.yaml").write_text("name: llm-infra\nruntime: python\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document))
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", name],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == expected
