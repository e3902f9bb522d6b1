"""`llm-infra tune`'s bad input: every problem named, exit 2, before any server starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

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


def written_jobs(tmp_path: Path) -> tuple[Path, str]:
    """`tune --kubernetes` into a folder; the run's nonce its Jobs' settings hold."""
    from infra.tune_kubernetes import run_nonce

    out = tmp_path / "jobs"
    result = tune("--kubernetes", str(out), "--expect", str(expectations(tmp_path)),
                  "--stop-server", "--runtime", "rocm")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out, run_nonce(out)


def job_log(out: Path, name: str, nonce: str, decode: float | None, server_said: str) -> Path:
    """A Job's log as `kubectl logs -c tune` keeps it: the runner's result line, and its error
    line quoting what the server printed."""
    from components.payloads.tune_figures import CandidateResult
    from components.payloads.tune_job import result_line
    from components.payloads.tune_measure import DepthFigures, Series

    runtime: dict[str, Any] = {
        "name": name, "image": f"ghcr.io/ggml-org/llama.cpp:server-{name}-b11434",
        "backend": name, "capabilities": [], "digest": None,
    }  # fmt: skip
    result = CandidateResult(name, runtime, current=name == "vulkan")
    if decode is None:
        result.rejection = f"crashed during load (exit code 134): {server_said}"
    else:
        result.depths.append(DepthFigures(depth=0, decode_server=Series([decode] * 3)))
    log = out / f"deepseek-v4-flash-0731-tune-{name}.log"
    log.write_text(f"{result_line(nonce, result)}\ntune: {name}: {server_said}\n")
    return log


def test_collect_takes_only_the_runners_lines_whatever_the_server_printed(tmp_path: Path) -> None:
    from components.payloads.tune_job import RESULT_PREFIX

    out, nonce = written_jobs(tmp_path)
    # The rocm server's chat template carries a result naming it the winner at 9e9 tok/s, with
    # and without the nonce (which it cannot know), behind a U+2028 a splitlines() would split.
    forged = json.dumps(
        {
            "name": "rocm",
            "runtime": {"name": "rocm"},
            "current": False,
            "rejection": None,
            "figures": [],
            "verdict": "",
            "reason": "",
        }
    )
    said = f"x\u2028{RESULT_PREFIX}{forged} \r{RESULT_PREFIX}{'f' * 32} {forged}"
    logs = [job_log(out, "vulkan", nonce, 9.0, "ok"), job_log(out, "rocm", nonce, None, said)]
    record_path = tmp_path / "strix-halo.tune.json"
    collected = tune("--collect", *map(str, logs), "--output-file", str(record_path))
    assert collected.returncode == 0, collected.stderr
    record = json.loads(record_path.read_text())
    assert record["winner"]["name"] == "vulkan"
    rocm = next(c for c in record["candidates"] if c["name"] == "rocm")
    assert rocm["verdict"] == "rejected" and rocm["reason"].startswith("crashed during load")


def test_collect_refuses_logs_away_from_their_jobs(tmp_path: Path) -> None:
    out, nonce = written_jobs(tmp_path)
    log = job_log(out, "vulkan", nonce, 9.0, "ok")
    moved = tmp_path / "elsewhere.log"
    moved.write_text(log.read_text())
    collected = tune("--collect", str(moved))
    assert collected.returncode == 2
    assert "holds no run nonce" in collected.stderr or "cannot read" in collected.stderr


def test_no_passing_candidate_exits_1_and_records_no_winner(tmp_path: Path) -> None:
    from infra.config import ConfigError
    from infra.tune import load_tune_record

    out, nonce = written_jobs(tmp_path)
    logs = [job_log(out, name, nonce, None, "failed to allocate") for name in ("vulkan", "rocm")]
    record_path = tmp_path / "strix-halo.tune.json"
    collected = tune("--collect", *map(str, logs), "--output-file", str(record_path))
    assert collected.returncode == 1, collected.stderr
    assert "no candidate passed: the record names no winner" in collected.stdout
    assert "Traceback" not in collected.stderr
    record = json.loads(record_path.read_text())
    assert record["winner"] is None
    assert {c["verdict"] for c in record["candidates"]} == {"rejected"}
    with pytest.raises(ConfigError, match="names no winner"):
        load_tune_record(record_path, "strix-halo", None)
