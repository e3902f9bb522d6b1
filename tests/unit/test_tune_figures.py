"""The bake-off's rule: a candidate replaces the current runtime only when it is faster by more
than the spread at every depth; rejections keep their reason; the table shows every figure."""

from __future__ import annotations

import pytest

from components.payloads import verify
from components.payloads.tune_figures import (
    KEPT,
    REJECTED,
    SLOWER,
    WINNER,
    CandidateResult,
    decide,
    format_table,
    name_problem,
    self_check_summary,
    tune_record,
)
from components.payloads.tune_measure import DepthFigures, Series, depths_for


def result(
    name: str, per_depth: dict[int, list[float]], *, current: bool = False
) -> CandidateResult:
    runtime = {"name": name, "image": f"example.org/llama:{name}-b11434", "backend": "cpu",
               "capabilities": []}  # fmt: skip
    r = CandidateResult(name, runtime, current=current)
    for depth, runs in per_depth.items():
        r.depths.append(DepthFigures(depth=depth, decode_server=Series(list(runs))))
    return r


def test_a_candidate_faster_by_more_than_the_spread_at_every_depth_wins() -> None:
    current = result("vulkan", {0: [9.0, 9.2, 8.9], 32768: [8.3, 8.4, 8.2]}, current=True)
    rocm = result("rocm", {0: [16.0, 16.1, 15.8], 32768: [12.7, 12.6, 12.9]})
    winner = decide([current, rocm], [0, 32768])
    assert winner is rocm and rocm.verdict == WINNER
    assert current.verdict == SLOWER and "rocm beat it" in current.reason


def test_within_the_spread_the_current_runtime_stays() -> None:
    current = result("vulkan", {0: [9.0, 9.6, 8.6]}, current=True)
    close = result("tuned-radv", {0: [9.9, 10.0, 9.8]})  # +0.9 median, spread 1.0
    winner = decide([current, close], [0])
    assert winner is current and current.verdict == KEPT
    assert close.verdict == SLOWER and "not faster by more than the spread 1.00" in close.reason


def test_faster_at_one_depth_but_not_another_does_not_win() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0], 65536: [8.3, 8.3, 8.3]}, current=True)
    mixed = result("rocm", {0: [16.0, 16.0, 16.0], 65536: [8.0, 8.1, 8.0]})
    assert decide([current, mixed], [0, 65536]) is current
    assert "at depth 65536" in mixed.reason


def test_of_two_that_beat_the_current_the_faster_wins() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.1]}, current=True)
    rocm = result("rocm", {0: [16.0, 16.0, 16.1]})
    radv = result("radv", {0: [19.8, 19.7, 19.9]})
    assert decide([current, rocm, radv], [0]) is radv
    assert rocm.verdict == SLOWER and "less than radv" in rocm.reason


def test_a_rejected_candidate_keeps_its_reason_and_never_wins() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0]}, current=True)
    broken = result("rocm", {0: [30.0, 30.0, 30.0]})
    broken.rejection = "failed the gate: the indexer was disabled"
    assert decide([current, broken], [0]) is current
    assert (
        broken.verdict == REJECTED and broken.reason == "failed the gate: the indexer was disabled"
    )


def test_a_candidate_not_measured_at_a_depth_is_rejected_naming_it() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0], 32768: [8.0, 8.0, 8.0]}, current=True)
    partial = result("rocm", {0: [20.0, 20.0, 20.0]})
    partial.depths.append(DepthFigures(depth=32768, errors=["run 1: connection reset"]))
    decide([current, partial], [0, 32768])
    assert partial.verdict == REJECTED
    assert partial.reason == "could not be measured at depth 32768: run 1: connection reset"


def test_when_the_current_runtime_is_rejected_the_fastest_that_passed_wins() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0]}, current=True)
    current.rejection = "crashed at the first decode (exit code 134)"
    slow, fast = result("cpu", {0: [3.0, 3.0, 3.0]}), result("rocm", {0: [12.0, 12.0, 12.0]})
    assert decide([current, slow, fast], [0]) is fast
    assert "the current runtime was rejected" in fast.reason


def test_no_winner_when_every_candidate_is_rejected() -> None:
    only = result("vulkan", {}, current=True)
    only.rejection = "ran out of memory while loading (failed to allocate)"
    assert decide([only], [0]) is None


def test_the_record_names_the_winner_runtime_and_every_reason() -> None:
    current = result("vulkan", {0: [9.0, 9.1, 9.0]}, current=True)
    rocm = result("rocm", {0: [16.0, 16.1, 15.9]})
    broken = result("custom", {})
    broken.rejection = "failed verify: 2 case(s)"
    winner = decide([current, rocm, broken], [0])
    record = tune_record("strix-halo", None, [current, rocm, broken], winner, depths=[0], runs=3,
                         where="local")  # fmt: skip
    assert record["winner"]["name"] == "rocm" and record["current"]["name"] == "vulkan"
    by_name = {c["name"]: c for c in record["candidates"]}
    assert by_name["custom"]["verdict"] == REJECTED
    assert by_name["custom"]["reason"] == "failed verify: 2 case(s)"
    assert by_name["rocm"]["figures"][0]["decodeTokSServer"] == {
        "runs": [16.0, 16.1, 15.9], "median": 16.0, "spread": 0.2,
    }  # fmt: skip


def test_the_table_shows_each_median_and_the_current_mark() -> None:
    current = result("vulkan", {0: [9.0, 9.2, 8.8]}, current=True)
    rocm = result("rocm", {0: [16.0, 16.4, 15.6]})
    decide([current, rocm], [0])
    table = format_table([current, rocm], [0])
    assert "vulkan *" in table and "9.00±0.20" in table and "16.00±0.40" in table


def test_a_depth_beyond_the_slot_becomes_the_deepest_that_fits() -> None:
    # -c 65536 -np 1 with 512 new tokens and 64 decoded: 64k itself does not fit.
    assert depths_for(65536, (0, 32768, 65536), prefill=512, decode=64) == [0, 32768, 64512]
    assert depths_for(131072, (0, 32768, 65536), prefill=512, decode=64) == [0, 32768, 65536]
    assert depths_for(4096, (0, 32768), prefill=512, decode=64) == [0, 3072]
    assert depths_for(600, (0, 1024), prefill=512, decode=64) == [0, 23]


@pytest.mark.parametrize("figure", [float("nan"), float("inf"), 1e308, -5.0])
def test_an_impossible_figure_is_a_rejection_never_a_winner(figure: float) -> None:
    current = result("vulkan", {0: [9.0, 9.1, 9.0]}, current=True)
    forged = result("rocm", {0: [figure, figure, figure]})
    assert decide([current, forged], [0]) is current
    assert forged.verdict == REJECTED
    assert "is impossible" in forged.reason and repr(figure) in forged.reason


@pytest.mark.parametrize("name", ["../x", "a/b", "X", "-a", "a" * 41, "", "a b", "a\nb"])
def test_a_candidate_name_outside_the_grammar_is_refused(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None and "is not a candidate name" in problem


def self_check(passed: bool) -> dict[str, object]:
    return {
        "passed": passed, "compared": 150 if passed else 20, "total": 192,
        "ties": 1, "maxLogprobDelta": 0.004,
        "problem": None if passed else "compared 20 of 192 reference tokens before the near-ties",
    }  # fmt: skip


def test_when_the_current_runtime_fails_its_own_check_nothing_is_judged() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0]}, current=True)
    current.self_check = self_check(False)
    current.rejection = "failed verify: compared 20 of 192"
    faster = result("rocm", {0: [16.0, 16.0, 16.0]})
    assert decide([current, faster], [0]) is None
    assert faster.verdict == REJECTED
    assert faster.reason.startswith("not judged: vulkan fails its own check (compared 20 of 192")


def test_a_current_runtime_that_passes_its_own_check_is_judged_as_before() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0]}, current=True)
    current.self_check = self_check(True)
    faster = result("rocm", {0: [16.0, 16.0, 16.0]})
    assert decide([current, faster], [0]) is faster


def test_a_self_check_without_token_probabilities_fails_for_want_of_evidence() -> None:
    """Expectations whose server gave no probabilities (a random model answering broken UTF-8
    pieces) compare texts only: every wrong runtime that answers the same garbage would pass."""
    doc = {"tolerance": dict(verify.DEFAULT_TOLERANCE)}
    blind = [verify.CaseResult("c", "\ufffd", text_ok=True)]
    summary = self_check_summary(blind, doc)
    assert not summary["passed"] and "no case" in summary["problem"]
    seen = [verify.CaseResult("c", "ab", text_ok=True, agreement=(2, 2))]
    assert self_check_summary(seen, doc)["passed"]


def test_the_record_keeps_the_self_check_and_the_rule() -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0]}, current=True)
    current.self_check = self_check(True)
    winner = decide([current], [0])
    record = tune_record(
        "strix-halo", None, [current], winner, depths=[0], runs=3, where="local",
        correctness="rule: greedy tokens agree wherever ...",
    )  # fmt: skip
    assert record["correctness"] == "rule: greedy tokens agree wherever ..."
    assert record["candidates"][0]["selfCheck"] == self_check(True)
    assert CandidateResult.from_json(record["candidates"][0]).self_check == self_check(True)


@pytest.mark.parametrize(
    "forged",
    [{"passed": "yes"}, {"compared": 1.5}, {"maxLogprobDelta": float("nan")}, {"problem": 3}],
)
def test_a_malformed_self_check_in_a_result_line_is_refused(forged: dict[str, object]) -> None:
    current = result("vulkan", {0: [9.0, 9.0, 9.0]}, current=True)
    current.self_check = {**self_check(True), **forged}
    with pytest.raises(ValueError, match="selfCheck"):
        CandidateResult.from_json(current.to_json())
