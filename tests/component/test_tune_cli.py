"""`llm-infra tune`'s bad input: every problem named, exit 2, before any server starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema

from tests.conftest import ROOT
from tests.support.cli import run_cli


def tune(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["tune", "strix-halo", *args], cwd=ROOT)


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


def expectations(tmp_path: Path) -> Path:
    from components.payloads.verify import new_expectations

    path = tmp_path / "expect.json"
    path.write_text(json.dumps(new_expectations()))
    return path


def test_the_kubernetes_bake_off_refuses_without_stopping_the_server(tmp_path: Path) -> None:
    result = tune("--kubernetes", str(tmp_path / "jobs"), "--expect", str(expectations(tmp_path)))
    assert result.returncode == 2
    assert result.stderr.splitlines()[1].startswith(
        "--stop-server: the bake-off runs on deepseek-v4-flash-0731's node, whose GPU and memory "
        "hold the server's model"
    )
    assert not (tmp_path / "jobs").exists()


def test_a_candidate_the_stack_cannot_run_is_named_with_the_stack_files_reason(
    tmp_path: Path,
) -> None:
    result = tune("--kubernetes", str(tmp_path / "jobs"), "--expect", str(expectations(tmp_path)),
                  "--stop-server", "--runtime", "cpu", "--runtime", "fastest")  # fmt: skip
    assert result.returncode == 2
    assert "--runtime: 'fastest' is neither a runtime name (vulkan, rocm, cpu)" in result.stderr
    result = tune("--kubernetes", str(tmp_path / "jobs"), "--expect", str(expectations(tmp_path)),
                  "--stop-server", "--runtime", "cpu")  # fmt: skip
    assert result.returncode == 2
    assert "--runtime cpu: server.gpuLayers: 40 layers for a GPU, but server.runtime 'cpu'" in (
        result.stderr
    )


def test_the_steps_stop_the_server_run_one_job_at_a_time_and_bring_it_back(
    tmp_path: Path,
) -> None:
    out = tmp_path / "jobs"
    result = tune("--kubernetes", str(out), "--expect", str(expectations(tmp_path)),
                  "--stop-server", "--runtime", "rocm", "-o", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    schema = json.loads((ROOT / "docs" / "json" / "tune.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(document)
    steps = document["steps"]
    assert steps[0] == "kubectl -n llm scale deployment/deepseek-v4-flash-0731 --replicas=0"
    applied = [s for s in steps if " apply -f " in s and "tune-config" not in s]
    assert [s.rsplit("/", 1)[1] for s in applied] == [
        "01-deepseek-v4-flash-0731-tune-vulkan.yaml", "02-deepseek-v4-flash-0731-tune-rocm.yaml",
    ]  # fmt: skip
    # The second Job starts only after the first is done and deleted.
    first_deleted = steps.index("kubectl -n llm delete job/deepseek-v4-flash-0731-tune-vulkan")
    assert first_deleted < steps.index(applied[1])
    assert steps[-2] == "kubectl -n llm scale deployment/deepseek-v4-flash-0731 --replicas=1"
    assert steps[-1].startswith("llm-infra tune strix-halo --collect ")
