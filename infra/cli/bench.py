"""``llm-infra bench``: decode, prefill, TTFT and concurrent throughput of a served model.

Measured from the client over streamed ``/v1/chat/completions`` (standard library only),
shaped like seed 002's figures and printed beside them. Tokens are counted per SSE event
from what the server says (llama-server ``timings.predicted_n`` with ``timings_per_token``,
vLLM ``usage.completion_tokens`` with ``continuous_usage_stats``, or ``logprobs``), never as
one per chunk, because speculative decoding sends several tokens in one chunk. Every prompt
starts with a unique nonce so the prefix cache cannot flatter prefill or TTFT.

Each figure is printed beside the server's own (llama-server ``timings``): the warm-up first
runs every shape the levels use (a long prompt, then each level's width), so the first
requests' pipeline compilation (Vulkan) is not measured; before each prefill request a tiny
one takes the previous slot's prompt-cache save, reported as its own line; a level with more
streams than the server has slots (``/props`` ``total_slots``, or ``--slots``) is labelled
queued and never set beside seed 002's batched figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The only project import: a standard-library payload, so `bench/serve.py` can load this file
# and verify.py by path on a plain Python (importing the `components` package needs pulumi).
from components.payloads.verify import (
    API_KEY_ENV,
    EndpointError,
    http_policy,
    model_id,
    request_json,
)

if TYPE_CHECKING:
    from infra.cli.common import Subparsers

# Seed 002: DeepSeek V4 Flash on one MI300X, vLLM, DSpark-7 speculative decoding.
SEED_002: dict[str, str] = {
    "decode_tok_s": "168.6",
    "prefill_tok_s": "7,900-8,500 (fresh prompts 6,988-7,019)",
    "ttft_ms": "-",
    "aggregate_1": "-",
    "aggregate_8": "542",
    "aggregate_64": "830 (burst)",
}
MAX_SSE_LINE = 1024 * 1024
"""The longest server-sent event line read (one token's event is a few hundred bytes)."""
MAX_SAMPLE_BYTES = 4 * 1024 * 1024
"""The largest /slots or /metrics answer the sampler reads."""

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


@dataclass
class StreamResult:
    """One streamed request as the client saw it (monotonic seconds) plus server figures."""

    ok: bool = False
    error: str | None = None
    t_start: float = 0.0
    t_first_token: float | None = None
    t_last_token: float | None = None
    t_end: float | None = None
    tokens_at_first: int = 0
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    count_source: str = "none"
    events: int = 0
    timings: dict[str, float] | None = None

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first generated token."""
        return None if self.t_first_token is None else self.t_first_token - self.t_start

    @property
    def server_busy(self) -> tuple[float, float] | None:
        """(start, end) of the server's work on this request: its prompt + predicted time."""
        t = self.timings or {}
        if self.t_end is None or "prompt_ms" not in t or "predicted_ms" not in t:
            return None
        return self.t_end - (t["prompt_ms"] + t["predicted_ms"]) / 1000, self.t_end

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over the time they took (1 / TPOT, like ``vllm bench``)."""
        if self.t_first_token is None or self.t_last_token is None:
            return None
        span = self.t_last_token - self.t_first_token
        n = self.output_tokens - self.tokens_at_first
        return n / span if span > 0 and n > 0 else None


def _count_in_event(event: dict[str, Any]) -> tuple[int | None, int, str]:
    """(cumulative count if the event states one, tokens carried in this event, source)."""
    timings = event.get("timings")
    if isinstance(timings, dict) and "predicted_n" in timings:
        return int(timings["predicted_n"]), 0, "timings.predicted_n"
    usage = event.get("usage")
    choices = event.get("choices") or []
    if isinstance(usage, dict) and "completion_tokens" in usage and choices:
        return int(usage["completion_tokens"]), 0, "usage.completion_tokens"
    if not choices:
        return None, 0, "none"
    choice = choices[0]
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        return None, len(logprobs["content"]), "logprobs"
    delta = choice.get("delta") or {}
    text = delta.get("content") or delta.get("reasoning_content") or choice.get("text")
    # Last resort, flagged in count_source: one token per chunk undercounts speculation.
    return None, (1 if text else 0), "chunks"


def stream_chat(
    base_url: str,
    body: dict[str, Any],
    *,
    api_key: str | None = None,
    timeout: float = 600.0,
) -> StreamResult:
    """POST a streaming chat completion and time every token-bearing SSE event."""
    payload = {
        **body,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    res = StreamResult(t_start=time.monotonic())
    try:
        with http_policy.request(
            base_url.rstrip("/") + "/v1/chat/completions",
            method="POST",
            headers=headers,
            token=api_key or None,
            body=json.dumps(payload).encode(),
            # A long prefill sends nothing for minutes, a slow decode a few bytes a second: the
            # deadline bounds a stream, not a rate.
            limits=http_policy.Limits(
                deadline_s=timeout, head_timeout_s=timeout, stall_s=timeout, min_rate=0.0
            ),
        ) as resp:
            _read_stream(resp, res)
    except http_policy.HttpError as exc:
        res.error = str(exc)
    return res


def _read_stream(resp: http_policy.Response, res: StreamResult) -> None:
    """Time every token-bearing SSE event of a streamed answer into res."""
    count = 0
    for raw in resp.lines(MAX_SSE_LINE):
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        now = time.monotonic()
        try:
            event = json.loads(data)
            if not isinstance(event, dict):
                raise ValueError(f"an event is {type(event).__name__}, not an object")
            new = _account(event, res, count)
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            res.error = (
                f"a malformed stream event ({exc!r}): {http_policy.shorten(repr(data), 120)}"
            )
            return
        res.events += 1
        if new > 0:
            count += new
            if res.t_first_token is None:
                res.t_first_token, res.tokens_at_first = now, count
            res.t_last_token = now
    res.t_end = time.monotonic()
    res.output_tokens = count
    res.ok = count > 0
    if not res.ok:
        res.error = "no tokens in the stream"


def _account(event: dict[str, Any], res: StreamResult, count: int) -> int:
    """The new tokens one event carries; its usage and timings go into res."""
    cumulative, carried, source = _count_in_event(event)
    new = (cumulative - count) if cumulative is not None else carried
    if source != "none" and res.count_source in ("none", "chunks"):
        res.count_source = source
    usage = event.get("usage")
    if isinstance(usage, dict):
        res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        res.cached_tokens = details.get("cached_tokens", res.cached_tokens)
        if not event.get("choices") and "completion_tokens" in usage:
            # The final usage-only event is authoritative for the total.
            new = max(0, int(usage["completion_tokens"]) - count)
    if isinstance(event.get("timings"), dict):
        res.timings = {
            k: float(v) for k, v in event["timings"].items() if isinstance(v, (int, float))
        }
    return int(new)


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


class ServerSampler:
    """Polls llama-server ``/slots`` and ``/metrics`` (or vLLM ``/metrics``) in a thread."""

    _GAUGE = re.compile(
        r"^(?:llamacpp:requests_processing|vllm:num_requests_running)(?:\{[^}]*\})?\s+([0-9.e+]+)",
        re.M,
    )

    def __init__(self, base_url: str, api_key: str | None, interval: float = 0.25) -> None:
        """Prepare; nothing is polled before ``start``."""
        self.base_url, self.api_key, self.interval = base_url.rstrip("/"), api_key, interval
        self.max_busy_slots: int | None = None
        self.max_processing: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._slots_ok = True
        self._metrics_ok = True

    def _get(self, path: str) -> bytes | None:
        limits = http_policy.Limits(deadline_s=5.0, head_timeout_s=5.0)
        try:
            with http_policy.request(
                self.base_url + path,
                token=self.api_key or None,
                max_body=MAX_SAMPLE_BYTES,
                limits=limits,
            ) as resp:
                return resp.read_all()
        except http_policy.HttpError:
            return None

    def poll_once(self) -> None:
        """One sample of both endpoints; an endpoint that fails is not asked again."""
        if self._slots_ok:
            raw = self._get("/slots")
            try:
                slots = json.loads(raw) if raw is not None else None
            except ValueError:
                slots = None
            if isinstance(slots, list):
                busy = sum(1 for s in slots if s.get("is_processing"))
                self.max_busy_slots = max(self.max_busy_slots or 0, busy)
            else:
                self._slots_ok = False
        if self._metrics_ok:
            raw = self._get("/metrics")
            found = self._GAUGE.findall(raw.decode(errors="replace")) if raw else []
            if found:
                value = int(max(float(v) for v in found))
                self.max_processing = max(self.max_processing or 0, value)
            else:
                self._metrics_ok = False

    def _loop(self) -> None:
        while not self._stop.is_set() and (self._slots_ok or self._metrics_ok):
            self.poll_once()
            self._stop.wait(self.interval)

    def __enter__(self) -> ServerSampler:
        """Start polling."""
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop polling and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=10)


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


def server_slots(base_url: str, api_key: str | None = None) -> int | None:
    """llama-server's parallel slots (``/props`` ``total_slots``); None where not served."""
    try:
        props = request_json(base_url, "/props", api_key=api_key, timeout=30.0)
    except (EndpointError, OSError, ValueError):
        return None
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) and slots > 0 else None


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


def add_options(p: argparse.ArgumentParser) -> None:
    """bench's options (all but the endpoint)."""
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"bearer token (default: ${API_KEY_ENV})",
    )
    p.add_argument("--model", help="model name to send (default: /v1/models data[0].id)")
    p.add_argument(
        "--output-file",
        type=Path,
        metavar="FILE",
        help="also write the JSON report to FILE (default: print only)",
    )
    p.add_argument(
        "--decode-requests",
        type=int,
        default=BenchConfig.decode_requests,
        help="single-stream decode requests (the median is reported)",
    )
    p.add_argument(
        "--decode-tokens",
        type=int,
        default=BenchConfig.decode_tokens,
        help="tokens generated per decode request",
    )
    p.add_argument(
        "--prefill-requests",
        type=int,
        default=BenchConfig.prefill_requests,
        help="long-prompt requests measuring prefill",
    )
    p.add_argument(
        "--prefill-words",
        type=int,
        default=BenchConfig.prefill_words,
        help="words in each prefill prompt",
    )
    p.add_argument("--concurrency", default="1,8,64", help="comma-separated stream counts")
    p.add_argument(
        "--concurrent-tokens",
        type=int,
        default=BenchConfig.concurrent_tokens,
        help="tokens generated per request of a concurrency level",
    )
    p.add_argument(
        "--requests-per-stream",
        type=int,
        default=BenchConfig.requests_per_stream,
        help="requests each stream of a concurrency level sends",
    )
    p.add_argument("--seed", type=int, help="prompt seed (default: a fresh one per run)")
    p.add_argument("--no-ignore-eos", action="store_true", help="let the model stop early")
    p.add_argument(
        "--timeout",
        type=float,
        default=BenchConfig.timeout,
        help="seconds a request may go without a byte (a queued stream waits for a slot)",
    )
    p.add_argument(
        "--warmup-rounds",
        type=int,
        default=BenchConfig.warmup_rounds,
        help="warm-up rounds: a long prompt and every level's width each (0: none)",
    )
    p.add_argument(
        "--slots",
        type=int,
        help="the server's parallel slots (default: llama-server /props total_slots); a level "
        "with more streams is labelled queued",
    )


def run(base_url: str, a: argparse.Namespace) -> int:
    """Run the benchmark against base_url and print the table; 1 on errors."""
    cfg = BenchConfig(
        model=a.model, decode_requests=a.decode_requests, decode_tokens=a.decode_tokens,
        prefill_requests=a.prefill_requests, prefill_words=a.prefill_words,
        concurrency=[int(c) for c in a.concurrency.split(",") if c.strip()],
        concurrent_tokens=a.concurrent_tokens, requests_per_stream=a.requests_per_stream,
        timeout=a.timeout, warmup_rounds=a.warmup_rounds, slots=a.slots,
    )  # fmt: skip
    if a.seed is not None:
        cfg.seed = a.seed
    if a.no_ignore_eos:
        cfg.extra_body.pop("ignore_eos", None)
    try:
        report = run_bench(base_url, cfg, api_key=a.api_key)
    except (EndpointError, OSError, KeyError) as exc:
        print(f"llm-infra bench: {exc}", file=sys.stderr)
        return 1
    print(format_table(report))
    if a.output_file:
        a.output_file.write_text(report.to_json() + "\n")
        print(f"wrote {a.output_file}")
    return 0 if not report.errors else 1


def add_parser(sub: Subparsers) -> None:
    """Register `bench`: the stack, --url, and every option of the benchmark."""
    from infra.cli.common import add_stack_argument
    from infra.cli.verify import URL_HELP

    parser = sub.add_parser(
        "bench", help="measure decode, prefill, TTFT and concurrent throughput of the endpoint"
    )
    add_stack_argument(parser)
    parser.add_argument("--url", help=URL_HELP)
    parser.add_argument(
        "--server",
        help="a stack with servers: the server to measure, by name (default: the one server)",
    )
    add_options(parser)
    parser.set_defaults(run=run_stack)


def run_stack(args: argparse.Namespace) -> int:
    """Benchmark the stack's endpoint (or --url)."""
    from infra.cli.common import report_config_error
    from infra.cli.verify import one_server
    from infra.config import ConfigError, read_stack_file
    from infra.targets import endpoint_url

    try:
        stack = read_stack_file(args.stack).stack()
        url = args.url
        # --url alone is enough, in a fleet too; --server picks (and checks) a fleet server.
        if args.server is not None or url is None:
            server = one_server(stack, args.server)
            url = url or endpoint_url(server)
    except ConfigError as exc:
        return report_config_error(exc, f"invalid configuration in {args.stack}")
    return run(url, args)


def main(argv: list[str] | None = None) -> int:
    """``BASE_URL [--out FILE.json] [--concurrency 1,8,64] ...``; 1 on errors."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base_url", help="e.g. http://127.0.0.1:8080 (no /v1)")
    add_options(p)
    a = p.parse_args(argv)
    return run(a.base_url, a)
