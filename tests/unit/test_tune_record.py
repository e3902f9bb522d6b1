"""Tune records (infra/tune.py): `server.runtime: tuned` reads `STACK.tune.json` strictly."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from components.llamacpp.runtimes import BUILTIN_RUNTIMES, Runtime
from infra.config import ConfigError, FleetStack, parse_stack, tune_path_for
from infra.targets.registry import with_tuned_runtimes
from infra.tune import load_tune_record, tune_record_problems
from tests.conftest import STACKS, stack_values
from tests.support.tune_records import written_record

DIGEST = "sha256:" + "ef" * 32
VULKAN = BUILTIN_RUNTIMES["vulkan"].to_record()
ROCM = BUILTIN_RUNTIMES["rocm"].to_record()


def record(**changes: Any) -> dict[str, Any]:
    """The record `llm-infra tune strix-halo` writes when ROCm wins."""
    document = written_record({**ROCM, "digest": DIGEST}, VULKAN)
    document.update(changes)
    return document


def test_the_tune_record_lives_beside_the_lock_as_verify_expectations_do() -> None:
    lock = STACKS / "strix-halo.lock.json"
    assert tune_path_for(lock) == STACKS / "strix-halo.tune.json"
    assert tune_path_for(lock, "qwen") == STACKS / "strix-halo.qwen.tune.json"


def test_the_winner_is_read_pinned_to_its_digest(tmp_path: Path) -> None:
    path = tmp_path / "strix-halo.tune.json"
    path.write_text(json.dumps(record()))
    winner = load_tune_record(path, "strix-halo")
    assert winner == Runtime.from_record({**ROCM, "digest": DIGEST})
    assert winner.pinned_image == f"ghcr.io/ggml-org/llama.cpp:server-rocm-b11434@{DIGEST}"


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"version": 2}, "version: 2 is not 1 (the format this build reads)"),
        ({"version": True}, "version: True is not 1"),
        ({"stack": "mi300x"}, "stack: 'mi300x', but the record is read for stack 'strix-halo'"),
        ({"server": "qwen"}, "server: 'qwen', but the record is read for server null"),
        ({"extra": 1}, "extra: unknown key"),
        ({"winner": {**ROCM, "backend": "metal"}}, "winner.backend: 'metal' is not one of"),
        ({"winner": {**ROCM, "image": "r.lan/x:latest"}}, "winner.image: 'r.lan/x:latest'"),
        ({"current": "vulkan"}, "current: str is not a mapping"),
        ({"candidates": {}}, "candidates: dict is not a list"),
        ({"candidates": [{"runtime": VULKAN, "verdict": "best", "reason": "", "figures": []}]},
         "candidates[0].verdict: 'best' is not one of winner, kept, slower, rejected"),
        ({"candidates": [{"runtime": VULKAN, "verdict": "winner", "reason": "", "figures": []}]},
         "winner: is not the runtime of the candidate whose verdict is 'winner'"),
        ({"candidates": [{"runtime": VULKAN, "verdict": "kept"}]},
         "candidates[0].reason: is required"),
        ({"correctness": {"margin": 0.5}}, "correctness: {'margin': 0.5} is not a string"),
        ({"candidates": [{"runtime": VULKAN, "verdict": "kept", "selfCheck": {"passed": 1}}]},
         "candidates[0].selfCheck.passed: 1 is not a bool"),
    ],
)  # fmt: skip
def test_a_malformed_record_names_the_field(changes: dict[str, Any], problem: str) -> None:
    problems = tune_record_problems(record(**changes), "strix-halo", None)
    assert any(p.startswith(problem) for p in problems), problems


def test_missing_and_unreadable_records_name_the_file_and_what_to_run(tmp_path: Path) -> None:
    path = tmp_path / "strix-halo.tune.json"
    with pytest.raises(ConfigError) as caught:
        load_tune_record(path, "strix-halo")
    assert caught.value.problems == [
        f"{path}: no tune record (run: llm-infra tune strix-halo, and commit its record)"
    ]
    path.write_text("{not json")
    with pytest.raises(ConfigError) as caught:
        load_tune_record(path, "strix-halo")
    assert caught.value.problems[0].startswith(f"{path}: not a readable tune record (not JSON")


def tuned(stack: str = "strix-halo") -> Any:
    values = copy.deepcopy(stack_values(stack))
    values["server"]["runtime"] = "tuned"
    values["server"].pop("image", None)
    return parse_stack(values)


def test_tuned_takes_the_winner_and_other_stacks_stay_as_they_are(tmp_path: Path) -> None:
    lock = tmp_path / "strix-halo.lock.json"
    tune_path_for(lock).write_text(json.dumps(record()))
    stack = with_tuned_runtimes(tuned(), lock)
    assert stack.server.effective_runtime == Runtime.from_record({**ROCM, "digest": DIGEST})  # type: ignore[union-attr]
    untouched = parse_stack(copy.deepcopy(stack_values("strix-halo")))
    assert with_tuned_runtimes(untouched, lock) is untouched


def test_a_fleet_server_reads_its_own_record(tmp_path: Path) -> None:
    values = copy.deepcopy(stack_values("strix-halo-pair"))
    assert "servers" in values, "strix-halo-pair is the fleet stack"
    values["servers"][1]["runtime"] = "tuned"
    fleet = parse_stack(values)
    assert isinstance(fleet, FleetStack)
    name = fleet.servers[1].resource_name
    lock = tmp_path / "strix-halo-pair.lock.json"
    with pytest.raises(ConfigError) as caught:
        with_tuned_runtimes(fleet, lock)
    (problem,) = caught.value.problems
    assert problem.startswith(f"servers[1].runtime: tuned: {tmp_path}/strix-halo-pair.{name}")
    tune_path_for(lock, name).write_text(json.dumps(record(stack="strix-halo-pair", server=name)))
    resolved = with_tuned_runtimes(fleet, lock)
    assert isinstance(resolved, FleetStack)
    assert resolved.server_stacks()[1].server.effective_runtime.backend == "rocm"
    assert resolved.server_stacks()[0].server.effective_runtime.backend == "vulkan"


def test_a_record_with_the_rule_and_the_self_check_is_read(tmp_path: Path) -> None:
    document = record(correctness="rule: greedy tokens agree wherever ...")
    document["candidates"][-1]["selfCheck"] = {
        "passed": True, "compared": 190, "total": 192, "ties": 1, "maxLogprobDelta": 0.01,
        "problem": None,
    }  # fmt: skip
    assert tune_record_problems(document, "strix-halo", None) == []
