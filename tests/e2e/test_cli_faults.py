"""Faults on the way out: a command that cannot write its output says so, exit 2, no traceback,
and leaves what was there as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra.render_out import RENDER_MARKER
from tests.conftest import ROOT
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


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"written": ["' + b"a" * (64 << 20) + b'"]}', "larger than 1048576 bytes"),
    ],
    ids=["nested", "64-MiB"],
)
def test_a_hostile_render_marker_is_refused_in_bounded_memory(
    tmp_path: Path, marker: bytes, message: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / RENDER_MARKER).write_bytes(marker)
    result = subprocess.run(
        ["prlimit", f"--as={512 * 2**20}", "--", sys.executable, "-m", "infra.cli", "render",
         "strix-halo", "--out", str(out)],
        cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert RENDER_MARKER in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [RENDER_MARKER]
