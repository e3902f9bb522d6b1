"""The bake-off on a real GPU with random models of other seeds than the fixtures'
(`python3 -m bench.tune --gpu --seed N` on one NVIDIA H100 through NVIDIA's Vulkan driver;
provenance in tests/fixtures/tune/README.md), from what each run recorded.

Where a run was complete, deciding again from its figures gives its winner and verdicts, the
current runtime passed its own check on compared tokens, every planted wrong runtime and the
hidden driver were rejected, and speculation was measured. The run whose recording held no
token probabilities is the case tune now refuses to judge."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from components.payloads import verify
from components.payloads.tune_figures import REJECTED, CandidateResult, decide, self_check_summary
from components.payloads.tune_local import gate_rejection
from tests.conftest import ROOT

SEEDS = ROOT / "tests" / "fixtures" / "tune" / "h100-seeds"
COMPLETE = ["seed-202-a", "seed-205-b", "seed-201-d", "seed-206-d", "seed-207-e", "seed-208-e",
            "seed-201-f", "seed-207-f"]  # fmt: skip
"""The runs that judged every candidate (the others were cut short or failed their own check)."""
FINAL_RULE = ["seed-201-d", "seed-206-d", "seed-207-e", "seed-208-e", "seed-201-f", "seed-207-f"]
"""The runs under the rule as it stands (held-back pieces judged at the reference's step)."""
ALONE = {"seed-201-f": "vulkan-ngl-99", "seed-207-f": "vulkan-ngl-99"}
"""Runs with the GPU to themselves: the winner each picked (two bake-offs sharing the GPU spread
the figures wider, and two such runs kept the current runtime)."""
PLANTED = {"driver-hidden", "wrong-weights", "wrong-quant-q4-0", "wrong-template"}


def record(run: str) -> dict[str, Any]:
    return json.loads((SEEDS / run / "tune.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("run", COMPLETE)
def test_deciding_again_gives_the_recorded_winner_and_verdicts(run: str) -> None:
    doc = record(run)
    results = [CandidateResult.from_json(c) for c in doc["candidates"]]
    winner = decide(results, doc["depths"])
    assert winner is not None
    picked = next(c for c in doc["candidates"] if c["verdict"] in ("winner", "kept"))
    assert winner.name == picked["name"] and winner.name.startswith("vulkan-ngl-")
    assert [(r.name, r.verdict) for r in results] == [
        (c["name"], c["verdict"]) for c in doc["candidates"]
    ]


@pytest.mark.parametrize(("run", "name"), sorted(ALONE.items()))
def test_with_the_gpu_to_itself_the_bake_off_picks_a_faster_runtime(run: str, name: str) -> None:
    doc = record(run)
    verdicts = {c["name"]: c["verdict"] for c in doc["candidates"]}
    assert verdicts[name] == "winner" and verdicts["vulkan-ngl-40"] == "slower"
    winner = next(c for c in doc["candidates"] if c["name"] == name)
    assert "x vulkan-ngl-40's over depths" in winner["reason"]


def test_every_run_under_the_rule_as_it_stands_passed_its_own_check_and_named_a_winner() -> None:
    for run in FINAL_RULE:
        doc = record(run)
        current = next(c for c in doc["candidates"] if c["current"])
        assert current["selfCheck"]["passed"], run
        assert any(c["verdict"] in ("winner", "kept") for c in doc["candidates"]), run
    seeds = {run.split("-")[1] for run in FINAL_RULE}
    assert len(seeds) >= 3


@pytest.mark.parametrize("run", COMPLETE)
def test_the_current_runtime_passed_its_own_check_on_compared_tokens(run: str) -> None:
    current = next(c for c in record(run)["candidates"] if c["current"])
    check = current["selfCheck"]
    assert check["passed"] and check["compared"] >= check["total"] / 2 > 0


@pytest.mark.parametrize("run", COMPLETE)
def test_every_planted_wrong_runtime_was_rejected(run: str) -> None:
    verdicts = {c["name"]: (c["verdict"], c["reason"]) for c in record(run)["candidates"]}
    assert set(verdicts) >= PLANTED
    for name in PLANTED:
        verdict, reason = verdicts[name]
        assert verdict == REJECTED, (name, reason)
        assert reason.startswith("failed the gate" if name == "driver-hidden" else "failed verify")


@pytest.mark.parametrize("run", COMPLETE)
def test_speculation_was_measured_with_its_drafted_and_accepted_tokens(run: str) -> None:
    spec = [c for c in record(run)["candidates"] if "spec" in c["name"]]
    assert {c["name"] for c in spec} == {"ngl-99-spec-draft-4", "ngl-99-spec-self"}
    for candidate in spec:
        assert candidate["verdict"] != REJECTED
        for depth in candidate["figures"]:  # per run
            drafted, accepted = depth["draftedTokens"], depth["acceptedTokens"]
            assert drafted and all(n > 0 for n in drafted)
            assert all(0 <= a <= d for a, d in zip(accepted, drafted, strict=True))


LOGGED = ["seed-205-b", "seed-207-f"]
"""The runs that kept every candidate's load log."""


def captured(run: str, name: str) -> str:
    return gzip.decompress((SEEDS / run / f"{name}.log.gz").read_bytes()).decode()


@pytest.mark.parametrize(
    ("name", "layers"),
    [("vulkan-ngl-40", "40"), ("vulkan-ngl-99", "99"), ("ngl-99-spec-draft-4", "99"),
     ("ngl-99-spec-self", "99")],
)  # fmt: skip
@pytest.mark.parametrize("run", LOGGED)
def test_the_gate_passes_the_real_loads_the_draft_included(
    run: str, name: str, layers: str
) -> None:
    text = captured(run, name)
    if "spec" in name:
        assert "loading draft model" in text
    assert gate_rejection(text, "vulkan", layers) is None


@pytest.mark.parametrize("run", LOGGED)
def test_the_gate_rejects_the_hidden_driver_of_a_seeded_run(run: str) -> None:
    out = (SEEDS / run / "driver-hidden.out").read_text()
    reason = gate_rejection(out + "\n" + captured(run, "driver-hidden"), "vulkan", "40")
    assert reason is not None and "no usable GPU found" in reason


def test_a_recording_without_token_probabilities_is_no_evidence_to_judge_by() -> None:
    """Seed 204's recording server answered broken UTF-8 pieces and gave no probabilities: the
    expectations held texts alone, and the wrong chat template, answering the same pieces,
    passed. Even a runtime that answers every recorded text exactly now fails the self-check."""
    doc = verify.load_expectations(SEEDS / "seed-204-b" / "expect.json")
    assert all("reference" not in case for case in doc["cases"])
    template = next(c for c in record("seed-204-b")["candidates"] if c["name"] == "wrong-template")
    assert template["verdict"] != REJECTED
    tolerance = verify.tolerance_of(doc)
    same = [
        verify.check_case(case, verify.Completion(case["expect"]["exact"], []), tolerance)
        for case in doc["cases"]
    ]
    assert all(result.ok for result in same)
    summary = self_check_summary(same, doc)
    assert not summary["passed"] and "no case" in summary["problem"]


def test_each_run_records_the_rule_it_judged_by() -> None:
    runs = sorted(p.name for p in SEEDS.iterdir() if p.is_dir())
    rules = {run: record(run)["correctness"] for run in runs}
    assert all(">= 0.01 nats" in rules[r] for r in runs if r.endswith("-a")), rules
    assert all(">= 0.05 nats" in rules[r] and "0.08 nats" in rules[r]
               for r in runs if not r.endswith("-a")), rules  # fmt: skip


def test_on_the_gpu_a_recording_without_probabilities_is_refused_before_any_judgement() -> None:
    """Seed 204 again, with the self-check that fails such expectations: the bake-off judged
    nothing (the wrong template included), named no winner and said why."""
    doc = record("seed-204-c")
    assert doc["winner"] is None
    current = next(c for c in doc["candidates"] if c["current"])
    assert not current["selfCheck"]["passed"]
    assert (
        "no case of the expectations holds token probabilities" in current["selfCheck"]["problem"]
    )
    assert all(c["verdict"] == REJECTED and c["reason"].startswith("not judged: ")
               for c in doc["candidates"])  # fmt: skip


def test_seed_201s_second_self_check_failed_only_on_held_back_pieces_the_rule_now_judges() -> None:
    """Seed 201's second H100 run: the current runtime's own check failed on one case, `code`,
    whose answer differed in pieces of a UTF-8 character that llama-server reports no step for
    (the steps' ids all agreed). Its reference step there was a near-tie that listed such pieces;
    the same answer, given as the server reports it, now passes (tests/unit/test_verify_rule.py
    holds each clause)."""
    doc = record("seed-201-c")
    current = next(c for c in doc["candidates"] if c["current"])
    problem = current["selfCheck"]["problem"]
    assert problem.startswith("1 case(s), code: text ") and doc["winner"] is None
    expect = verify.load_expectations(SEEDS / "seed-201-c" / "expect.json")
    case = next(c for c in expect["cases"] if c["id"] == "code")
    steps = [verify.TokenStep.from_json(s) for s in case["reference"]["steps"]]
    answer = problem.split("text ", 1)[1].split(" != ")[0].strip("'")
    assert answer.startswith("d" * 10 + "\ufffd")
    pieces = answer[10:].rstrip("d")
    held = verify.TokenStep(pieces + "d", steps[10].logprob, steps[10].top, steps[10].token_id,
                            steps[10].top_ids)  # fmt: skip
    got = [*steps[:10], held, *steps[11:]]
    result = verify.check_case(case, verify.Completion(answer, got), verify.tolerance_of(expect))
    assert result.ok, result.problems
    assert result.tie is not None and result.tie.position == 10
