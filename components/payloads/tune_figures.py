"""The bake-off's decision and its record: which runtime won, by how much, and why each other one
did not.

The rule: every candidate that passed (loaded, passed the gate, answered its first decode,
passed verify, measured at every depth) is set against the current runtime at each depth by its
median decode tok/s over the runs (the server's own timings; the client's are shown beside). It
beats the current one only when, at every depth, its median is above the current median by more
than the larger of the two spreads (max - min of the runs); among those that beat it, the
highest geometric mean of the per-depth ratios wins. Otherwise the current runtime stays
(`kept`). When the current runtime itself is rejected, the fastest candidate that passed wins.
Standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from components.payloads import verify
from components.payloads.tune_measure import DepthFigures, Series

RECORD_VERSION = 1

WINNER, KEPT, SLOWER, REJECTED = "winner", "kept", "slower", "rejected"

# Why a candidate is rejected (the first words of its reason).
CRASHED_LOADING = "crashed during load"
OUT_OF_MEMORY = "ran out of memory"
FAILED_GATE = "failed the gate"
CRASHED_FIRST_DECODE = "crashed at the first decode"
FAILED_VERIFY = "failed verify"
FAILED_MEASURING = "could not be measured"
NOT_JUDGED = "not judged"


CANDIDATE_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,38}[a-z0-9])?")
"""A candidate's name: what a Job, a log file and the record are named by (a DNS label's
letters, at most 40, so `SERVER-tune-NAME` still fits one)."""
MAX_TOKENS_PER_S = 1_000_000.0
"""The fixed ceiling of any measured figure (tok/s) where the stack names no device: no device
decodes or prefills a million tokens a second of one stream, so a figure above it (or not
finite) is a broken or forged measurement, never a fast candidate. Where the stack names its
device (`memory.device`), decode has a physical ceiling of its own (`DecodeCeiling`)."""


@dataclass(frozen=True)
class DecodeCeiling:
    """The physical decode ceiling of the stack's device: its bandwidth over the bytes one
    token reads (`infra.devices.decode_ceiling`); a decode figure above it is impossible."""

    tok_s: float
    what: str
    """How it is made (`256 GB/s of the Radeon 8060S / 2.64 GiB a token`)."""


def name_problem(name: object) -> str | None:
    """Why a candidate name is refused, or None."""
    if not isinstance(name, str) or not CANDIDATE_NAME.fullmatch(name):
        return (
            f"{str(name)[:80]!r} is not a candidate name (lower-case letters, digits, '.' and "
            "'-', at most 40, starting and ending with a letter or digit)"
        )
    return None


@dataclass
class CandidateResult:
    """One candidate's run: its runtime, figures and verdict."""

    name: str
    runtime: dict[str, Any]
    current: bool = False
    rejection: str | None = None
    """Why it cannot serve (a phrase above and what was seen), or None when it passed."""
    depths: list[DepthFigures] = field(default_factory=list)
    load_seconds: float | None = None
    verdict: str = ""
    reason: str = ""
    self_check: dict[str, Any] | None = None
    """The current runtime's verify against the expectations before it is judged (tune_local's
    `self_check_summary`); a failure means nothing can be judged by that rule."""

    def decode(self, depth: int) -> Series | None:
        """The decode series that decides at a depth: the server's own timings (they hold no
        HTTP or streaming jitter), else the client's."""
        for figures in self.depths:
            if figures.depth == depth:
                series = figures.decode_server if figures.decode_server.values else figures.decode
                return series if series.values else None
        return None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CandidateResult:
        """A result as a Job printed it (`to_json` and its `rejection`), before the verdict."""
        load = doc.get("loadSeconds")
        problem = name_problem(doc.get("name"))
        if problem:
            raise ValueError(problem)
        return cls(
            name=str(doc["name"]),
            runtime=dict(doc["runtime"]),
            current=bool(doc["current"]),
            rejection=doc.get("rejection"),
            depths=[DepthFigures.from_json(d) for d in doc["figures"]],
            load_seconds=None if load is None else float(load),
            self_check=self_check_of(doc.get("selfCheck")),
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "runtime": self.runtime,
            "current": self.current,
            "verdict": self.verdict,
            "reason": self.reason,
            "loadSeconds": None if self.load_seconds is None else round(self.load_seconds, 1),
            "figures": [d.to_json() for d in self.depths],
        }
        if self.self_check is not None:
            out["selfCheck"] = self.self_check
        return out


SELF_CHECK_KEYS = {"passed": bool, "compared": int, "total": int, "ties": int}


def self_check_of(doc: object) -> dict[str, Any] | None:
    """A result line's self-check, its fields typed (None: the candidate ran none)."""
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ValueError(f"selfCheck: {doc!r:.80} is not an object")
    for key, kind in SELF_CHECK_KEYS.items():
        if type(doc.get(key)) is not kind:
            raise ValueError(f"selfCheck.{key}: {doc.get(key)!r:.80} is not a {kind.__name__}")
    problem = doc.get("problem")
    if problem is not None and not isinstance(problem, str):
        raise ValueError(f"selfCheck.problem: {problem!r:.80} is not a string")
    delta = doc.get("maxLogprobDelta")
    if delta is not None and not (isinstance(delta, (int, float)) and math.isfinite(delta)):
        raise ValueError(f"selfCheck.maxLogprobDelta: {delta!r:.80} is not a finite number")
    return {
        **{key: doc[key] for key in SELF_CHECK_KEYS},
        "maxLogprobDelta": delta,
        "problem": problem,
    }


def verify_rejection(results: list[verify.CaseResult], expectations: dict[str, Any]) -> str | None:
    """Why verify's results reject a candidate (the decisive rule, docs/verify-and-bench.md):
    the first failed case, else too little compared; None when it passes."""
    failed = [r for r in results if not r.ok]
    if failed:
        first = failed[0]
        return f"{FAILED_VERIFY}: {len(failed)} case(s), {first.case_id}: " + "; ".join(
            first.problems
        )
    evidence = verify.evidence_problem(results, verify.tolerance_of(expectations))
    return None if evidence is None else f"{FAILED_VERIFY}: {evidence}"


def self_check_summary(
    results: list[verify.CaseResult], expectations: dict[str, Any]
) -> dict[str, Any]:
    """The current runtime's agreement with its own expectations, as the record keeps it."""
    counted = [r.agreement for r in results if r.agreement is not None]
    deltas = [r.max_logprob_delta for r in results if r.max_logprob_delta is not None]
    problem = verify_rejection(results, expectations)
    if problem is None and not counted:
        problem = (
            f"{FAILED_VERIFY}: no case of the expectations holds token probabilities (the "
            "recording server returned none, as for an answer of broken UTF-8 pieces): nothing "
            "to judge candidates by"
        )
    return {
        "passed": problem is None,
        "compared": sum(a for a, _ in counted),
        "total": sum(t for _, t in counted),
        "ties": sum(r.tie is not None for r in results),
        "maxLogprobDelta": round(max(deltas), 6) if deltas else None,
        "problem": None if problem is None else problem.removeprefix(f"{FAILED_VERIFY}: "),
    }


def figures_problem(result: CandidateResult, ceiling: DecodeCeiling | None = None) -> str | None:
    """A figure no device makes: not finite, negative, or above MAX_TOKENS_PER_S (a decode
    figure: above the device's physical `ceiling` where the stack names its device); more
    draft tokens accepted than drafted."""
    for figures in result.depths:
        for what, series in (
            ("decode", figures.decode),
            ("decode (server)", figures.decode_server),
        ):
            for value in series.values if ceiling is not None else ():
                if math.isfinite(value) and ceiling is not None and value > ceiling.tok_s:
                    return (
                        f"{FAILED_MEASURING}: a {what} figure of {value:,.1f} tok/s at depth "
                        f"{figures.depth} is above the device's physical ceiling of "
                        f"{ceiling.tok_s:,.1f} tok/s ({ceiling.what}; without a device: the "
                        f"fixed ceiling {MAX_TOKENS_PER_S:,.0f})"
                    )
        for what, series in (
            ("decode", figures.decode), ("decode (server)", figures.decode_server),
            ("prefill", figures.prefill), ("prefill (server)", figures.prefill_server),
        ):  # fmt: skip
            for value in series.values:
                if not math.isfinite(value) or not 0 <= value <= MAX_TOKENS_PER_S:
                    return (
                        f"{FAILED_MEASURING}: a {what} figure of {value!r} tok/s at depth "
                        f"{figures.depth} is impossible (finite, 0 to {MAX_TOKENS_PER_S:,.0f})"
                    )
        if len(figures.drafted) != len(figures.accepted) or any(
            not 0 <= kept <= drafted
            for drafted, kept in zip(figures.drafted, figures.accepted, strict=False)
        ):
            return (
                f"{FAILED_MEASURING}: draft figures at depth {figures.depth} are impossible "
                f"({figures.accepted} accepted of {figures.drafted} drafted)"
            )
    if result.load_seconds is not None and not (
        math.isfinite(result.load_seconds) and result.load_seconds >= 0
    ):
        return f"{FAILED_MEASURING}: a load time of {result.load_seconds!r} s is impossible"
    return None


def _measured_problem(
    result: CandidateResult, depths: list[int], ceiling: DecodeCeiling | None = None
) -> str | None:
    problem = figures_problem(result, ceiling)
    if problem:
        return problem
    for depth in depths:
        if result.decode(depth) is None:
            errors = [e for d in result.depths if d.depth == depth for e in d.errors]
            seen = f": {errors[0]}" if errors else ""
            return f"{FAILED_MEASURING} at depth {depth}{seen}"
    return None


def _beats(
    challenger: CandidateResult, current: CandidateResult, depths: list[int]
) -> tuple[bool, str, float]:
    """Whether challenger beats current at every depth; the reason; the geometric-mean ratio."""
    ratios = []
    for depth in depths:
        mine, theirs = challenger.decode(depth), current.decode(depth)
        assert mine is not None and theirs is not None
        m, t = mine.median or 0.0, theirs.median or 0.0
        margin = max(mine.spread or 0.0, theirs.spread or 0.0)
        ratios.append(m / t if t > 0 else math.inf)
        if m - t <= margin:
            return (
                False,
                f"decode {m:.2f} tok/s at depth {depth} vs {t:.2f} for {current.name}: not "
                f"faster by more than the spread {margin:.2f}",
                0.0,
            )
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else 0.0
    return True, f"decode {mean:.2f}x {current.name}'s over depths {depths}", mean


def decide(
    results: list[CandidateResult], depths: list[int], ceiling: DecodeCeiling | None = None
) -> CandidateResult | None:
    """Set every result's verdict and reason; return the winner (None when all are rejected).
    `ceiling`: the device's physical decode ceiling, where the stack names its device."""
    for result in results:
        if result.rejection is None:
            result.rejection = _measured_problem(result, depths, ceiling)
    passed = [r for r in results if r.rejection is None]
    for result in results:
        if result.rejection is not None:
            result.verdict, result.reason = REJECTED, result.rejection
    current = next((r for r in results if r.current), None)
    if current is not None and current.self_check and not current.self_check["passed"]:
        # The rule cannot tell this runtime from itself: nothing it passes or fails means much.
        why = f"{NOT_JUDGED}: {current.name} fails its own check ({current.self_check['problem']})"
        for result in results:
            result.verdict, result.reason = REJECTED, why
        return None
    if not passed:
        return None
    if current is None or current.rejection is not None:

        def score(r: CandidateResult) -> float:
            medians = [(r.decode(d) or Series()).median or 0.0 for d in depths]
            return math.exp(sum(math.log(max(m, 1e-9)) for m in medians) / max(len(medians), 1))

        winner = max(passed, key=score)
        why = "the current runtime was rejected" if current else "no current runtime was named"
        for r in passed:
            if r is winner:
                r.verdict, r.reason = WINNER, f"{why}; the fastest that passed"
            else:
                r.verdict, r.reason = SLOWER, f"slower than {winner.name}"
        return winner
    best: tuple[float, CandidateResult] | None = None
    for r in passed:
        if r is current:
            continue
        beats, reason, ratio = _beats(r, current, depths)
        r.verdict, r.reason = (WINNER if beats else SLOWER), reason
        if beats and (best is None or ratio > best[0]):
            best = (ratio, r)
    if best is None:
        current.verdict, current.reason = KEPT, "no candidate beat it by more than the spread"
        return current
    winner = best[1]
    for r in passed:
        if r is not winner and r.verdict == WINNER:
            r.verdict, r.reason = SLOWER, f"beat {current.name} but less than {winner.name}"
    current.verdict, current.reason = SLOWER, f"{winner.name} beat it: {winner.reason}"
    return winner


def tune_record(
    stack: str,
    server: str | None,
    results: list[CandidateResult],
    winner: CandidateResult | None,
    *,
    depths: list[int],
    runs: int,
    where: str,
    correctness: str | None = None,
) -> dict[str, Any]:
    """The reviewed record, `stacks/STACK.tune.json`; `correctness` is verify's rule with its
    thresholds (`verify.rule_line`), which every candidate passed or failed."""
    current = next((r for r in results if r.current), None)
    extra = {} if correctness is None else {"correctness": correctness}
    return {
        "version": RECORD_VERSION,
        "stack": stack,
        "server": server,
        "where": where,
        "depths": depths,
        "runs": runs,
        "rule": "median decode tok/s at every depth above the current runtime's by more than "
        "the larger spread (max - min over the runs)",
        "current": None if current is None else current.runtime,
        "winner": None if winner is None else winner.runtime,
        "candidates": [r.to_json() for r in results],
        **extra,
    }


def _cell(series: Series) -> str:
    if series.median is None:
        return "-"
    return f"{series.median:.2f}±{(series.spread or 0.0) / 2:.2f}"


def _acceptance(result: CandidateResult) -> str:
    """`draft accepted N%` over every measured run of a speculative candidate ('' otherwise)."""
    drafted = sum(sum(f.drafted) for f in result.depths)
    if not drafted:
        return ""
    accepted = sum(sum(f.accepted) for f in result.depths)
    return f"(draft accepted {100 * accepted / drafted:.0f}% of {drafted})"


def format_table(results: list[CandidateResult], depths: list[int]) -> str:
    """One table: a row per candidate, decode and prefill per depth (client, server's own)."""
    head = ["candidate", "verdict"]
    for d in depths:
        head += [f"decode@{d}", "(server)", f"prefill@{d}", "(server)"]
    head.append("reason")
    rows = [head]
    for r in results:
        row = [r.name + (" *" if r.current else ""), r.verdict]
        for d in depths:
            figures = next((f for f in r.depths if f.depth == d), DepthFigures(depth=d))
            row += [
                _cell(figures.decode),
                _cell(figures.decode_server),
                _cell(figures.prefill),
                _cell(figures.prefill_server),
            ]
        row.append(" ".join(filter(None, [_acceptance(r), r.reason])))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]
    lines.append("tok/s: median±half the spread over the runs; * the current runtime")
    return "\n".join(lines)
