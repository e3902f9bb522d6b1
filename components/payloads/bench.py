"""The serving benchmark: decode, prefill, TTFT and concurrent throughput of a served model.

Measured from the client over streamed ``/v1/chat/completions`` (``bench_client.py``), shaped
like seed 002's figures and reported beside them (``bench_report.py``). Every prompt starts with
a unique nonce so the prefix cache cannot flatter prefill or TTFT.

Each figure is set beside the server's own (llama-server ``timings``): the warm-up first
runs every shape the levels use (a long prompt, then each level's width), so the first
requests' pipeline compilation (Vulkan) is not measured; before each prefill request a tiny
one takes the previous slot's prompt-cache save, reported as its own figure; a level with more
streams than the server has slots (``/props`` ``total_slots``, or ``BenchConfig.slots``) is
labelled queued. Standard library only: the back-end of ``llm-infra bench`` and
``bench/serve.py``.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from components.payloads.bench_client import ServerSampler, StreamResult, server_slots, stream_chat
from components.payloads.bench_report import BenchReport, LevelResult
from components.payloads.verify import model_id

_WORDS = (
    "river",
    "stone",
    "cloud",
    "lantern",
    "harbor",
    "meadow",
    "copper",
    "signal",
    "orbit",
    "willow",
    "canyon",
    "ember",
    "falcon",
    "glacier",
    "quartz",
    "velvet",
    "thunder",
    "saffron",
    "pilot",
    "marble",
    "cedar",
    "beacon",
    "tundra",
    "violet",
    "compass",
    "ridge",
    "plasma",
    "harvest",
    "mirror",
    "anchor",
    "summit",
    "prairie",
    "nebula",
    "cobalt",
    "garden",
)


def varied_prompt(index: int, words: int, seed: int = 0) -> str:
    """A prompt of about ``words`` words that no other index shares a prefix with."""
    rng = random.Random(seed * 1_000_003 + index)
    nonce = f"{rng.getrandbits(64):016x}"
    body = " ".join(rng.choice(_WORDS) for _ in range(words))
    return f"[{nonce}] Continue this list of words: {body}"


@dataclass
class BenchConfig:
    """What to run; the defaults are sized for the real deployment, tests shrink them."""

    model: str | None = None
    decode_requests: int = 5
    decode_tokens: int = 256
    prefill_requests: int = 3
    prefill_words: int = 4000
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 64])
    concurrent_tokens: int = 256
    requests_per_stream: int = 2
    # A fresh seed per run: a rerun on the same server must not hit its own earlier prompts.
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(2**31))
    timeout: float = 900.0
    """Seconds a request may go without a byte: a queued stream waits for a slot that long."""
    warmup_rounds: int = 2
    """Rounds of the warm-up (a long prompt, then every level's width); 0 skips it."""
    slots: int | None = None
    """The server's parallel slots; None asks llama-server's ``/props`` (``total_slots``)."""
    # Polling /slots and /metrics costs the server a little; 4 Hz is invisible on a real model.
    sample_interval: float = 0.25
    extra_body: dict[str, Any] = field(
        # llama-server: timings in every event (exact token counts); both servers: run to
        # max_tokens so every request decodes the same length.
        default_factory=lambda: {"timings_per_token": True, "ignore_eos": True}
    )


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _run_summary(r: StreamResult) -> dict[str, Any]:
    return {
        "ok": r.ok, "error": r.error, "output_tokens": r.output_tokens,
        "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens,
        "ttft_ms": None if r.ttft is None else r.ttft * 1000, "decode_tok_s": r.decode_tok_s,
        "events": r.events, "count_source": r.count_source, "timings": r.timings,
    }  # fmt: skip


def _body(model: str, prompt: str, max_tokens: int, cfg: BenchConfig) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        **cfg.extra_body,
    }


def busy_seconds(windows: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: time the server worked on any request."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(windows):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _concurrently(
    base_url: str,
    bodies: list[list[dict[str, Any]]],
    cfg: BenchConfig,
    api_key: str | None,
) -> list[StreamResult]:
    """One thread per stream, each sending its bodies back to back; every result."""
    results: list[StreamResult] = []
    lock = threading.Lock()

    def worker(stream: list[dict[str, Any]]) -> None:
        for body in stream:
            r = stream_chat(base_url, body, api_key=api_key, timeout=cfg.timeout)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run_level(
    base_url: str,
    model: str,
    concurrency: int,
    cfg: BenchConfig,
    *,
    api_key: str | None = None,
    first_index: int = 0,
    slots: int | None = None,
) -> tuple[LevelResult, list[StreamResult]]:
    """``concurrency`` threads, each sending ``requests_per_stream`` requests back to back."""
    bodies = [
        [
            _body(model, varied_prompt(first_index + i * cfg.requests_per_stream + k, 48,
                                       cfg.seed), cfg.concurrent_tokens, cfg)
            for k in range(cfg.requests_per_stream)
        ]
        for i in range(concurrency)
    ]  # fmt: skip
    with ServerSampler(base_url, api_key, cfg.sample_interval) as sampler:
        started = time.monotonic()
        results = _concurrently(base_url, bodies, cfg, api_key)
        wall = time.monotonic() - started
    ok = [r for r in results if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    windows = [w for r in ok if (w := r.server_busy) is not None]
    busy = busy_seconds(windows) if len(windows) == len(ok) and ok else 0.0
    level = LevelResult(
        concurrency=concurrency,
        requests=len(results),
        failed=len(results) - len(ok),
        output_tokens=tokens,
        wall_s=wall,
        aggregate_tok_s=tokens / wall if wall > 0 else 0.0,
        median_stream_decode_tok_s=_median([r.decode_tok_s for r in ok]),
        median_ttft_ms=_median([r.ttft * 1000 if r.ttft is not None else None for r in results]),
        max_busy_slots=sampler.max_busy_slots,
        max_requests_processing=sampler.max_processing,
        queued=slots is not None and concurrency > slots,
        server_aggregate_tok_s=tokens / busy if busy > 0 else None,
        server_stream_decode_tok_s=_median(
            [(r.timings or {}).get("predicted_per_second") for r in ok]
        ),
        outside_timings_ms=max(0.0, wall - busy) * 1000 / len(ok) if busy > 0 else None,
    )
    return level, results


def warm_up(
    base_url: str,
    model: str,
    cfg: BenchConfig,
    slots: int | None,
    next_index: Any,
    *,
    api_key: str | None = None,
) -> float:
    """Run every shape the measurements use, ``warmup_rounds`` times; seconds it took.

    The first requests after a load compile GPU pipelines (Vulkan: a first 159-token prefill
    took 6.4 s against 21.5 ms warm on an H200), per batch shape: a long prompt compiles the
    prefill kernels, each level's width (capped at the slots) the batched decode kernels.
    """
    started = time.monotonic()
    widths = sorted({1, *(min(c, slots) if slots else c for c in cfg.concurrency)})
    for _ in range(cfg.warmup_rounds):
        long_prompt = varied_prompt(next_index(), cfg.prefill_words, cfg.seed)
        stream_chat(base_url, _body(model, long_prompt, 4, cfg), api_key=api_key,
                    timeout=cfg.timeout)  # fmt: skip
        for width in widths:
            bodies = [[_body(model, varied_prompt(next_index(), 48, cfg.seed), 16, cfg)]
                      for _ in range(width)]  # fmt: skip
            _concurrently(base_url, bodies, cfg, api_key)
    return time.monotonic() - started


def run_bench(base_url: str, cfg: BenchConfig, *, api_key: str | None = None) -> BenchReport:
    """Warm up, then single-stream decode, prefill, and every concurrency level."""
    model = cfg.model or model_id(base_url, api_key)
    slots = cfg.slots or server_slots(base_url, api_key)
    errors: list[str] = []
    index = 0

    def next_index() -> int:
        nonlocal index
        index += 1
        return index

    def tiny() -> StreamResult:
        body = _body(model, varied_prompt(next_index(), 4, cfg.seed), 1, cfg)
        return stream_chat(base_url, body, api_key=api_key, timeout=cfg.timeout)

    warmup_s = warm_up(base_url, model, cfg, slots, next_index, api_key=api_key)

    decode = [
        stream_chat(
            base_url,
            _body(model, varied_prompt(next_index(), 32, cfg.seed), cfg.decode_tokens, cfg),
            api_key=api_key,
            timeout=cfg.timeout,
        )
        for _ in range(cfg.decode_requests)
    ]
    # Before a new task llama-server saves the previous slot to its prompt cache (1.4 s after
    # a 24k-token prompt): a tiny request before each prefill request takes that cost, and
    # the tiny request after a long one against the one after a short one measures it.
    prefill: list[StreamResult] = []
    after_short: list[float | None] = []
    after_long: list[float | None] = []
    for _ in range(cfg.prefill_requests):
        after = tiny().ttft
        (after_long if prefill else after_short).append(after)
        prefill.append(
            stream_chat(
                base_url,
                _body(model, varied_prompt(next_index(), cfg.prefill_words, cfg.seed), 1, cfg),
                api_key=api_key,
                timeout=cfg.timeout,
            )
        )
    if prefill:
        after_long.append(tiny().ttft)
        after_short.append(tiny().ttft)
    short, long_ = _median(after_short), _median(after_long)
    cache_save_ms = None if short is None or long_ is None else max(0.0, long_ - short) * 1000
    for r in (*decode, *prefill):
        if not r.ok:
            errors.append(r.error or "failed")

    def prefill_rate(r: StreamResult) -> float | None:
        if not r.ok or r.ttft is None or not r.prompt_tokens:
            return None
        fresh = r.prompt_tokens - (r.cached_tokens or 0)
        return fresh / r.ttft

    levels = []
    for c in cfg.concurrency:
        level, runs = run_level(
            base_url, model, c, cfg, api_key=api_key, first_index=next_index() * 100_000,
            slots=slots,
        )  # fmt: skip
        levels.append(level)
        errors += [r.error or "failed" for r in runs if not r.ok]

    sources = {r.count_source for r in decode if r.ok}
    return BenchReport(
        base_url=base_url,
        model=model,
        config=asdict(cfg),
        decode_tok_s=_median([r.decode_tok_s for r in decode if r.ok]),
        decode_server_tok_s=_median(
            [(r.timings or {}).get("predicted_per_second") for r in decode if r.ok]
        ),
        ttft_ms=_median([r.ttft * 1000 if r.ttft is not None else None for r in decode]),
        prefill_tok_s=_median([prefill_rate(r) for r in prefill]),
        prefill_server_tok_s=_median(
            [(r.timings or {}).get("prompt_per_second") for r in prefill if r.ok]
        ),
        prefill_prompt_tokens=int(_median([r.prompt_tokens for r in prefill if r.ok]) or 0) or None,
        prefill_cached_tokens=max((r.cached_tokens or 0 for r in prefill), default=None),
        count_source="/".join(sorted(sources)) or "none",
        levels=levels,
        decode_runs=[_run_summary(r) for r in decode],
        prefill_runs=[_run_summary(r) for r in prefill],
        errors=errors,
        slots=slots,
        cache_save_ms=cache_save_ms,
        warmup_s=warmup_s,
    )
