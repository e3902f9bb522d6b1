"""The benchmark's report: every figure beside the server's own and seed 002's.

Seed 002's figures (DeepSeek V4 Flash on one MI300X, vLLM, DSpark-7) are printed beside the
measured ones, except where a level had more streams than the server has slots: such a level is
labelled queued and never set beside seed 002's batched figures. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

# Seed 002: DeepSeek V4 Flash on one MI300X, vLLM, DSpark-7 speculative decoding.
SEED_002: dict[str, str] = {
    "decode_tok_s": "168.6",
    "prefill_tok_s": "7,900-8,500 (fresh prompts 6,988-7,019)",
    "ttft_ms": "-",
    "aggregate_1": "-",
    "aggregate_8": "542",
    "aggregate_64": "830 (burst)",
}


@dataclass
class LevelResult:
    """Aggregate throughput at one concurrency level and what the server showed meanwhile."""

    concurrency: int
    requests: int
    failed: int
    output_tokens: int
    wall_s: float
    aggregate_tok_s: float
    median_stream_decode_tok_s: float | None
    median_ttft_ms: float | None
    max_busy_slots: int | None
    max_requests_processing: int | None
    queued: bool = False
    """More streams than slots: the server ran at most ``slots`` at once, the rest waited."""
    server_aggregate_tok_s: float | None = None
    """Output tokens over the time the server was working on any request (its timings)."""
    server_stream_decode_tok_s: float | None = None
    """Median of the server's ``predicted_per_second`` over the level's requests."""
    outside_timings_ms: float | None = None
    """Wall time not covered by any request's server timings, per request: HTTP, and the
    server's own work between requests (saving the finished slot to the prompt cache, looking
    the next prompt up in it), which its timings do not count. The aggregate's gap to the
    server-side figure, as its own number."""


@dataclass
class BenchReport:
    """Everything measured, JSON-serialisable with ``to_json``."""

    base_url: str
    model: str
    config: dict[str, Any]
    decode_tok_s: float | None
    decode_server_tok_s: float | None
    ttft_ms: float | None
    prefill_tok_s: float | None
    prefill_server_tok_s: float | None
    prefill_prompt_tokens: int | None
    prefill_cached_tokens: int | None
    count_source: str
    levels: list[LevelResult]
    decode_runs: list[dict[str, Any]]
    prefill_runs: list[dict[str, Any]]
    errors: list[str]
    slots: int | None = None
    cache_save_ms: float | None = None
    """Median extra TTFT of a tiny request sent after a prefill request: the server saving
    the previous slot's long prompt to its prompt cache, kept out of the prefill figure."""
    warmup_s: float | None = None

    def to_json(self) -> str:
        """The report as indented JSON, seed 002's figures included for comparison."""
        return json.dumps({**asdict(self), "seed_002": SEED_002}, indent=2)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(measured: float | None, server: float | None) -> str | None:
    if measured is None or not server:
        return None
    return f"{measured / server:.3f}"


def agreement(report: BenchReport) -> dict[str, str]:
    """Client figure over the server's own, per figure that has both (1.000 = equal)."""
    pairs: dict[str, tuple[float | None, float | None]] = {
        "decode": (report.decode_tok_s, report.decode_server_tok_s),
        "prefill": (report.prefill_tok_s, report.prefill_server_tok_s),
    }
    for level in report.levels:
        c = level.concurrency
        pairs[f"stream decode @{c}"] = (
            level.median_stream_decode_tok_s,
            level.server_stream_decode_tok_s,
        )
        pairs[f"aggregate @{c}"] = (level.aggregate_tok_s, level.server_aggregate_tok_s)
    return {k: r for k, (m, srv) in pairs.items() if (r := _ratio(m, srv)) is not None}


def format_table(report: BenchReport) -> str:
    """Measured figures beside the server's own and seed 002's (MI300X, vLLM, DSpark-7)."""
    rows = [
        ("metric", "measured", "server-side", "seed 002 (MI300X)"),
        ("single-stream decode tok/s (median)", _fmt(report.decode_tok_s),
         _fmt(report.decode_server_tok_s), SEED_002["decode_tok_s"]),
        (f"prefill tok/s (median, ~{report.prefill_prompt_tokens or '?'} tok prompt)",
         _fmt(report.prefill_tok_s), _fmt(report.prefill_server_tok_s),
         SEED_002["prefill_tok_s"]),
        ("prompt-cache save of the previous slot, ms (not in prefill)",
         _fmt(report.cache_save_ms), "-", "-"),
        ("TTFT ms (median, short prompt)", _fmt(report.ttft_ms), "-", SEED_002["ttft_ms"]),
    ]  # fmt: skip
    slots = report.slots
    measured = {level.concurrency: level for level in report.levels}
    for c in sorted({*measured, 8, 64}):
        level = measured.get(c)
        seed = SEED_002.get(f"aggregate_{c}", "-")
        name = f"aggregate output tok/s @ {c} streams"
        if level is None:
            rows.append((name, "not run", "-", seed))
            continue
        seen = level.max_busy_slots
        seen = level.max_requests_processing if seen is None else seen
        busy = f"{_fmt(level.server_aggregate_tok_s)} (max busy {'?' if seen is None else seen})"
        if level.queued:
            # One request per slot at a time: not a batched figure, never beside seed 002's.
            name = f"{name}, QUEUED ({slots} slot{'s' if slots != 1 else ''})"
            seed = "- (not batched)"
        rows.append((name, _fmt(level.aggregate_tok_s), busy, seed))
    outside = [
        f"@{lv.concurrency} {_fmt(lv.outside_timings_ms)}"
        for lv in report.levels
        if lv.outside_timings_ms is not None
    ]
    if outside:
        rows.append(
            ("wall ms/request outside the server's timings (HTTP, prompt-cache save/lookup)",
             ", ".join(outside), "-", "-")
        )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    ratios = agreement(report)
    if ratios:
        lines.append("measured / server-side: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    lines.append(
        f"tokens counted from: {report.count_source}; slots: {slots or '?'}; "
        f"prefill cached tokens (max): {report.prefill_cached_tokens}; "
        f"warm-up: {_fmt(report.warmup_s)} s"
    )
    lines += [f"error: {e}" for e in report.errors[:10]]
    return "\n".join(lines)
