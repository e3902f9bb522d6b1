"""The benchmark's client: one streamed chat completion timed per token, and the server's gauges.

Tokens are counted per server-sent event from what the server says (llama-server
``timings.predicted_n`` with ``timings_per_token``, vLLM ``usage.completion_tokens`` with
``continuous_usage_stats``, or ``logprobs``), never as one per chunk, because speculative
decoding sends several tokens in one chunk. While a level runs, ``ServerSampler`` polls
llama-server ``/slots`` and ``/metrics`` (or vLLM ``/metrics``) for how many requests the server
really ran at once. Standard library only (``bench.py`` runs it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from components.payloads import http_policy
from components.payloads.verify import EndpointError, request_json

MAX_SSE_LINE = 1024 * 1024
"""The longest server-sent event line read (one token's event is a few hundred bytes)."""
MAX_SAMPLE_BYTES = 4 * 1024 * 1024
"""The largest /slots or /metrics answer the sampler reads."""


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
    return stream_post(base_url, "/v1/chat/completions", payload, api_key=api_key, timeout=timeout)


def stream_post(
    base_url: str,
    path: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    timeout: float = 600.0,
) -> StreamResult:
    """POST a streaming request (its payload asks for the stream) to `path` and time every
    token-bearing SSE event (llama-server's `/completion` with `timings_per_token` too)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    res = StreamResult(t_start=time.monotonic())
    try:
        with http_policy.request(
            base_url.rstrip("/") + path,
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


def server_slots(base_url: str, api_key: str | None = None) -> int | None:
    """llama-server's parallel slots (``/props`` ``total_slots``); None where not served."""
    try:
        props = request_json(base_url, "/props", api_key=api_key, timeout=30.0)
    except (EndpointError, OSError, ValueError):
        return None
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) and slots > 0 else None
