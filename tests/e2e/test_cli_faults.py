"""Faults on the way out: a command that cannot write its output says so, exit 2, no traceback,
and leaves what was there as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.project import project_env


def test_schema_output_file_on_a_full_disk_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "stack.schema.json"
    target.write_text("{}\n")
    # The schema is tens of KiB: past a 4 KiB file-size limit the write fails "File too large",
    # as it would on a full disk or quota.
    result = subprocess.run(
        ["prlimit", "--fsize=4096", "--", sys.executable, "-m", "infra.cli", "schema",
         "--output-file", str(target)],
        cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "cannot write" in result.stderr and "File too large" in result.stderr
    assert "Traceback" not in result.stderr
    assert target.read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stack.schema.json"]
