"""The decisive rule of `verify` (docs/verify-and-bench.md) on token steps with known margins.

The real runtimes (equivalent kernels that flip a near-tie, wrong weights, a wrong template)
are in tests/contract/test_verify.py; here each clause of the rule on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.payloads import verify
from components.payloads.tune_figures import verify_rejection

TOLERANCE = dict(verify.DEFAULT_TOLERANCE)
MARGIN = TOLERANCE["decisive_margin"]
TOLERANCE_GPU = {**TOLERANCE, "decisive_margin": 0.05, "logprob_abs": 0.08}
"""`bench.tune --gpu`'s thresholds for a random model (docs/verify-and-bench.md "On a GPU")."""


def step(
    token_id: int, *alternatives: tuple[int, float], chosen_lp: float = -0.1
) -> verify.TokenStep:
    """A greedy step choosing `token_id` with `chosen_lp`, listing the alternatives after it."""
    top = [(f"t{token_id}", chosen_lp)] + [(f"t{i}", lp) for i, lp in alternatives]
    ids = [token_id] + [i for i, _ in alternatives]
    return verify.TokenStep(f"t{token_id}", chosen_lp, top, token_id, ids)


def case_of(reference: list[verify.TokenStep], text: str) -> dict[str, Any]:
    return {
        "id": "c",
        "expect": {"exact": text},
        "reference": {"steps": [s.to_json() for s in reference]},
    }


def decisive(token_id: int) -> verify.TokenStep:
    return step(token_id, (900, -0.1 - 3 * MARGIN))


def near_tie(token_id: int, runner_up: int) -> verify.TokenStep:
    return step(token_id, (runner_up, -0.1 - MARGIN / 10))


def text(steps: list[verify.TokenStep]) -> str:
    return "".join(s.token for s in steps)


def test_the_same_tokens_pass_with_the_whole_reference_compared() -> None:
    ref = [decisive(1), decisive(2), decisive(3)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(ref), ref), TOLERANCE
    )
    assert result.ok and result.agreement == (3, 3) and result.tie is None


def test_a_flip_at_a_near_tie_to_the_runner_up_is_noise_and_ends_the_comparison() -> None:
    ref = [decisive(1), near_tie(2, 7), decisive(3), decisive(4)]
    got = [decisive(1), near_tie(7, 2), decisive(5), decisive(6)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert result.ok, result.problems
    assert result.agreement == (1, 4)
    assert result.tie is not None and result.tie.position == 1
    assert result.text_ok  # the text agrees up to the tie


def test_a_near_tie_after_tokens_that_split_a_character_passes_on_the_text_before_them() -> None:
    """llama-server merges or empties the text of tokens that split a UTF-8 character, so the
    joined token texts are not a prefix of the answer; the text is compared up to them."""
    piece = verify.TokenStep(
        "\ufffd", -0.1, [("\ufffd", -0.1), ("t9", -0.1 - 3 * MARGIN)], 8, [8, 9]
    )  # two pieces of one character: each shown as U+FFFD, the answer shows the character
    ref = [decisive(1), piece, piece, near_tie(3, 7), decisive(4)]
    got = [decisive(1), piece, piece, near_tie(7, 3), decisive(5)]
    want, answer = "t1\u00e9t3t4", "t1\u00e9t7t5"
    result = verify.check_case(case_of(ref, want), verify.Completion(answer, got), TOLERANCE)
    assert result.ok, result.problems
    assert result.tie is not None and result.tie.position == 3
    other = verify.check_case(case_of(ref, want), verify.Completion("X" + answer, got), TOLERANCE)
    assert not other.ok


def test_without_ids_the_text_up_to_a_near_tie_must_still_agree() -> None:
    ref = [verify.TokenStep("a", -0.1, [("a", -0.1), ("z", -0.1 - 3 * MARGIN)])]
    ref += [verify.TokenStep("b", -0.1, [("b", -0.1), ("c", -0.1 - MARGIN / 10)])]
    got = [ref[0], verify.TokenStep("c", -0.1, [("c", -0.1), ("b", -0.1 - MARGIN / 10)])]
    agreeing = verify.check_case(case_of(ref, "ab"), verify.Completion("ac", got), TOLERANCE)
    assert agreeing.ok, agreeing.problems
    other = verify.check_case(case_of(ref, "ab"), verify.Completion("xc", got), TOLERANCE)
    assert not other.ok and "text" in other.problems[0]


def test_a_divergence_where_the_reference_was_decisive_fails_naming_the_margin() -> None:
    ref = [decisive(1), decisive(2), decisive(3)]
    got = [decisive(1), step(900, (2, -0.2)), decisive(3)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert not result.ok
    assert "diverges at token 1 of 3" in result.problems[0]
    assert f"by {3 * MARGIN:.3f} nats" in result.problems[0]


def test_a_near_tie_flipped_to_a_token_the_reference_never_ranked_fails() -> None:
    ref = [decisive(1), near_tie(2, 7), decisive(3)]
    got = [decisive(1), step(555, (2, -0.2)), decisive(3)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert not result.ok
    assert "a token the reference did not rank" in result.problems[0]


def test_a_margin_just_at_the_threshold_is_decisive() -> None:
    ref = [step(1, (2, -0.1 - MARGIN)), decisive(3)]
    got = [step(2, (1, -0.1 - MARGIN / 10)), decisive(3)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert not result.ok


def test_a_wider_tolerance_in_the_file_is_the_threshold_used() -> None:
    ref = [step(1, (2, -0.1 - MARGIN)), decisive(3)]
    got = [step(2, (1, -0.2)), decisive(3)]
    wide = {**TOLERANCE, "decisive_margin": 2 * MARGIN}
    result = verify.check_case(case_of(ref, text(ref)), verify.Completion(text(got), got), wide)
    assert result.ok, result.problems


def test_a_text_that_differs_before_the_tie_fails() -> None:
    ref = [decisive(1), near_tie(2, 7), decisive(3)]
    got = [decisive(1), near_tie(7, 2), decisive(3)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion("X" + text(got), got), TOLERANCE
    )
    assert result.text_ok is False and not result.ok


def test_an_answer_of_pieces_alone_without_steps_fails_saying_why_it_has_none() -> None:
    """Seed 201's wrong chat template on the H100: 31 U+FFFD and no step (every token ended
    inside a UTF-8 character). It fails, and the reason is the answer, not the request."""
    ref = [decisive(1), decisive(2)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion("\ufffd" * 31, []), TOLERANCE
    )
    assert not result.ok
    assert "returned none for an answer of 31 U+FFFD alone" in result.problems[0]
    assert "unsupported" not in result.problems[0]
    dropped = verify.check_case(case_of(ref, text(ref)), verify.Completion("t1t2", []), TOLERANCE)
    assert not dropped.ok and "request logprobs/top_logprobs unsupported" in dropped.problems[0]


def test_without_a_tie_the_whole_text_must_match() -> None:
    ref = [decisive(1), decisive(2)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(ref) + "!", ref), TOLERANCE
    )
    assert result.text_ok is False and not result.ok


def test_an_answer_ending_at_a_near_tie_is_noise_ending_at_a_decisive_step_is_not() -> None:
    ref = [decisive(1), near_tie(2, 7), decisive(3)]
    ended_at_tie = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(ref[:1]), ref[:1]), TOLERANCE
    )
    assert ended_at_tie.ok and ended_at_tie.tie is not None
    ended_early = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(ref[:2]), ref[:2]), TOLERANCE
    )
    assert not ended_early.ok


def test_the_logprob_tolerance_still_applies_where_the_tokens_agree() -> None:
    ref = [decisive(1), decisive(2)]
    got = [decisive(1), step(2, (900, -5.0), chosen_lp=-0.1 - 2 * TOLERANCE["logprob_abs"])]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert any("logprob differs" in p for p in result.problems)


def test_a_step_listing_one_token_counts_as_decisive() -> None:
    ref = [decisive(5), verify.TokenStep("t1", -0.1, [("t1", -0.1)], 1, [1]), decisive(2)]
    got = ref[:1]  # ended where the reference named one candidate
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert not result.ok and "unknown nats" in result.problems[0]


def results_with(compared: int, total: int) -> list[verify.CaseResult]:
    return [verify.CaseResult("c", "", agreement=(compared, total))]


def test_ties_so_early_that_under_the_share_is_compared_fail_as_too_little_evidence() -> None:
    share = TOLERANCE["min_compared"]
    total = 100
    low = int(share * total) - 1
    assert verify.evidence_problem(results_with(low, total), TOLERANCE) is not None
    assert verify.evidence_problem(results_with(low + 1, total), TOLERANCE) is None


def test_tune_rejects_a_candidate_on_too_little_evidence_as_failed_verify() -> None:
    doc = {"tolerance": TOLERANCE}
    rejection = verify_rejection(results_with(1, 100), doc)
    assert rejection is not None and rejection.startswith("failed verify: compared 1 of 100")
    assert verify_rejection(results_with(100, 100), doc) is None


def test_the_table_shows_where_a_tie_ended_the_comparison() -> None:
    ref = [decisive(1), near_tie(2, 7), decisive(3)]
    got = [decisive(1), near_tie(7, 2), decisive(3)]
    result = verify.check_case(
        case_of(ref, text(ref)), verify.Completion(text(got), got), TOLERANCE
    )
    assert f"1/3 (tie {MARGIN / 10:.3f})" in verify.format_table([result])


def test_an_old_file_without_the_rule_gets_the_default_thresholds() -> None:
    old = {"tolerance": {"logprob_abs": 0.5, "min_top1_agreement": 1.0}}
    tolerance = verify.tolerance_of(old)
    assert tolerance["decisive_margin"] == MARGIN
    assert f">= {MARGIN:g} nats" in verify.rule_line(tolerance)


SEED_201 = Path(__file__).parent.parent / "fixtures" / "tune" / "h100-seeds" / "seed-201-c"


def code_case() -> tuple[dict[str, Any], list[verify.TokenStep]]:
    """Seed 201's `code` case as the H100 recorded it: 32 tokens reported as 28 steps, the
    15th carrying four held-back tokens (two pieces of a character and two `d`s) before its
    own `d`."""
    doc = verify.load_expectations(SEED_201 / "expect.json")
    case = next(c for c in doc["cases"] if c["id"] == "code")
    return case, [verify.TokenStep.from_json(s) for s in case["reference"]["steps"]]


def held_back_at(
    reference: list[verify.TokenStep], position: int, run: str
) -> list[verify.TokenStep]:
    """The current server's steps when it chose a piece of a character at `position`: the
    reference's steps before it, then a step of the same id whose text carries the pieces."""
    chosen = reference[position]
    merged = verify.TokenStep(run + chosen.token, chosen.logprob, chosen.top, chosen.token_id,
                              chosen.top_ids)  # fmt: skip
    return [*reference[:position], merged, *reference[position + 1 :]]


def test_a_held_back_piece_chosen_at_a_reference_near_tie_is_noise() -> None:
    """The H100's second start of seed 201's model answered `code` with pieces of a character
    from token 10 on; the steps' ids all agreed (the pieces have no step), so only the text
    showed it. The reference's margin there was 0.006 nats with two pieces among its
    candidates: a near-tie, and the comparison ends there."""
    case, ref = code_case()
    answer = "dddddddddd\ufffdd\ufffdd\ufffdd\ufffdd\ufffdd\ufffdd\ufffdddddddddd"
    got = held_back_at(ref, 10, "\ufffdd" * 7)
    result = verify.check_case(case, verify.Completion(answer, got), TOLERANCE_GPU)
    assert result.ok, result.problems
    assert result.tie is not None and result.tie.position == 10
    assert result.tie.margin is not None and result.tie.margin < 0.01
    assert result.agreement == (10, 28)


def test_a_held_back_piece_where_the_reference_was_decisive_fails() -> None:
    case, ref = code_case()
    sure = ref[10]
    apart = [(t, lp - (0.0 if i == 0 else 1.0)) for i, (t, lp) in enumerate(sure.top)]
    ref[10] = verify.TokenStep(sure.token, sure.logprob, apart, sure.token_id, sure.top_ids)
    case = {**case, "reference": {"steps": [s.to_json() for s in ref]}}
    answer = "dddddddddd\ufffdd" + "d" * 16
    got = held_back_at(ref, 10, "\ufffd")
    result = verify.check_case(case, verify.Completion(answer, got), TOLERANCE_GPU)
    assert not result.ok
    assert "diverges at token 10 of 28: the reference was decisive" in result.problems[0]


def test_a_held_back_piece_the_reference_never_ranked_fails() -> None:
    case, ref = code_case()
    plain = ref[10]
    ref[10] = verify.TokenStep(plain.token, plain.logprob,
                               [(t if t else "x", lp) for t, lp in plain.top],
                               plain.token_id, plain.top_ids)  # fmt: skip
    case = {**case, "reference": {"steps": [s.to_json() for s in ref]}}
    got = held_back_at(ref, 10, "\ufffd")
    result = verify.check_case(case, verify.Completion("d" * 10 + "\ufffdd", got), TOLERANCE_GPU)
    assert not result.ok
    assert "to a token the reference did not rank" in result.problems[0]


def test_where_the_reference_held_back_a_piece_the_comparison_ends_unjudged() -> None:
    """The reference's 15th step carries held-back tokens; a server that answered a plain `d`
    there diverged where the reference reported no probabilities: nothing shows it was
    decisive, so the comparison ends there and counts only the 14 steps before."""
    case, ref = code_case()
    assert ref[14].token == "\ufffdd\ufffddd"
    got = ref[:14] + [ref[13]] * 14
    result = verify.check_case(case, verify.Completion("d" * 32, got), TOLERANCE_GPU)
    assert result.ok, result.problems
    assert result.tie is not None and result.tie.unreported and result.agreement == (14, 28)


def test_the_same_held_back_pieces_agree_step_by_step() -> None:
    case, ref = code_case()
    result = verify.check_case(case, verify.Completion(case["expect"]["exact"], ref), TOLERANCE_GPU)
    assert result.ok and result.tie is None and result.agreement == (28, 28)


def test_a_piece_reported_on_its_own_is_judged_like_any_token() -> None:
    """An invalid byte is reported at once, U+FFFD alone with its own step and probabilities
    (the CPU build's seed-1 model answers so): another token there is an ordinary divergence,
    not a held-back one, so where the reference was decisive it fails."""
    lone = verify.TokenStep(
        "\ufffd", -0.1, [("\ufffd", -0.1), ("t9", -0.1 - 3 * MARGIN)], 8, [8, 9]
    )
    ref = [decisive(1), lone, decisive(2)]
    got = [decisive(1), decisive(5), decisive(2)]
    result = verify.check_case(
        case_of(ref, "t1\ufffdt2"), verify.Completion("t1t5t2", got), TOLERANCE
    )
    assert not result.ok and result.tie is None
    assert "diverges at token 1 of 3" in result.problems[0]
