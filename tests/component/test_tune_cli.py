"""`llm-infra tune`'s bad input: every problem named, exit 2, before any server starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def tune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "tune", "strix-halo", *args],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_a_bad_candidates_file_a_missing_model_and_no_expectations_are_each_named(
    tmp_path: Path,
) -> None:
    candidates = tmp_path / "candidates.json"
    candidates.write_text(json.dumps([
        {"name": "a", "runtime": {"name": "a", "image": "example.org/l:b11434", "backend": "cpu"},
         "command": ["llama-server"], "setArgs": {"-ngl": "0"}, "gpu": True},
    ]))  # fmt: skip
    result = tune("--local", str(candidates), "--model", str(tmp_path / "absent.gguf"),
                  "--expect", str(tmp_path / "absent.json"))  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "llm-infra: cannot tune strix-halo:"
    assert lines[1].startswith("--local: ") and "unknown keys ['gpu']" in lines[1]
    assert lines[2].startswith("--model: ") and "absent.gguf is not a file here" in lines[2]
    assert lines[3].startswith("--expect: ") and "every candidate must pass verify" in lines[3]
    assert "Traceback" not in result.stderr


def test_a_candidate_runtime_is_checked_as_a_tune_record_holds_it(tmp_path: Path) -> None:
    candidates = tmp_path / "candidates.json"
    candidates.write_text(json.dumps([
        {"name": "a", "runtime": {"name": "a", "image": "latest", "backend": "cpu",
                                  "capabilities": ["teleport"]},
         "command": ["llama-server"]},
    ]))  # fmt: skip
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = tune("--local", str(candidates), "--model", str(model))
    assert result.returncode == 2
    assert "--local: candidate 'a': runtime.capabilities" in result.stderr
    assert "--local: candidate 'a': runtime.image" in result.stderr


def test_fewer_than_three_runs_is_refused() -> None:
    result = tune("--local", "c.json", "--runs", "2")
    assert result.returncode == 2
    assert "at least 3 runs, so that a median and a spread exist" in result.stderr
