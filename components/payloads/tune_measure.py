"""Decode and prefill of a running llama-server at a context depth, as llama-bench's
``pp``/``tg`` ``@ d`` figures are, each beside the server's own timings.

At depth ``d`` a prefix of ``d`` token ids fills slot 0 once; each run then sends that prefix
plus a suffix of ``prefill_tokens`` new ids that no earlier run sent, streamed, with
``cache_prompt`` so the server reuses the prefix and processes only the suffix (its
``timings.cache_n`` and ``prompt_n`` say so and are recorded), and ``ignore_eos`` so that every
run decodes ``decode_tokens``. Prompts are token ids (llama-server ``/completion`` takes them),
made from the model's own ``/tokenize`` of varied words, so a depth is exact. Standard library
only: the back-end of ``llm-infra tune`` locally and inside its Kubernetes Jobs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from components.payloads.bench import varied_prompt
from components.payloads.bench_client import stream_post
from components.payloads.verify import EndpointError, field_of, request_json

FILL_TIMEOUT_S = 3600.0
"""The longest a depth's one-time prefill may take (64k tokens at ~30 tok/s is ~36 minutes)."""
RUN_TIMEOUT_S = 900.0
"""The longest one measured run may take."""


@dataclass
class Series:
    """One figure over the runs: the median and the spread (max - min) decide, all are kept."""

    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def spread(self) -> float | None:
        return max(self.values) - min(self.values) if self.values else None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Series:
        return cls([float(v) for v in doc["runs"]])

    def to_json(self) -> dict[str, Any]:
        median, spread = self.median, self.spread
        return {
            "runs": [round(v, 3) for v in self.values],
            "median": None if median is None else round(median, 3),
            "spread": None if spread is None else round(spread, 3),
        }


@dataclass
class DepthFigures:
    """Decode and prefill at one depth: the client's figures and the server's own."""

    depth: int
    decode: Series = field(default_factory=Series)
    decode_server: Series = field(default_factory=Series)
    prefill: Series = field(default_factory=Series)
    prefill_server: Series = field(default_factory=Series)
    cached_tokens: list[int] = field(default_factory=list)
    """`timings.cache_n` of each run: the prefix the server reused (should be the depth)."""
    errors: list[str] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    """`timings.draft_n` of each run with speculative decoding: tokens the draft proposed."""
    accepted: list[int] = field(default_factory=list)
    """`timings.draft_n_accepted` of each such run: proposed tokens the target kept."""

    @property
    def acceptance(self) -> float | None:
        """The share of drafted tokens the target accepted over the runs (None: no draft)."""
        drafted = sum(self.drafted)
        return sum(self.accepted) / drafted if drafted else None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DepthFigures:
        return cls(
            depth=int(doc["depth"]),
            decode=Series.from_json(doc["decodeTokS"]),
            decode_server=Series.from_json(doc["decodeTokSServer"]),
            prefill=Series.from_json(doc["prefillTokS"]),
            prefill_server=Series.from_json(doc["prefillTokSServer"]),
            cached_tokens=[int(n) for n in doc["cachedTokens"]],
            errors=[str(e) for e in doc["errors"]],
            drafted=[int(n) for n in doc.get("draftedTokens", [])],
            accepted=[int(n) for n in doc.get("acceptedTokens", [])],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "decodeTokS": self.decode.to_json(),
            "decodeTokSServer": self.decode_server.to_json(),
            "prefillTokS": self.prefill.to_json(),
            "prefillTokSServer": self.prefill_server.to_json(),
            "cachedTokens": self.cached_tokens,
            "errors": self.errors,
            **(
                {"draftedTokens": self.drafted, "acceptedTokens": self.accepted}
                if self.drafted
                else {}
            ),
        }


def token_ids(base_url: str, count: int, *, api_key: str | None = None) -> list[int]:
    """``count`` token ids of varied words, from the server's own tokenizer (cycled)."""
    if count <= 0:
        return []
    words = min(count, 8192)
    answer = request_json(
        base_url, "/tokenize", {"content": varied_prompt(0, words), "add_special": False},
        api_key=api_key, timeout=120.0,
    )  # fmt: skip
    ids = [int(t) for t in field_of(answer, "/tokenize", "tokens")]
    if not ids:
        raise EndpointError("/tokenize: no tokens for a prompt of words")
    return [ids[i % len(ids)] for i in range(count)]


def prefilled(cached: int, depth: int) -> bool:
    """A run processed its prompt: the slot held no more of it than the ``depth`` tokens before
    it (a run whose prompt was cached beyond them prefilled only the rest, often one token)."""
    return cached <= depth


def measure_depth(
    base_url: str,
    depth: int,
    *,
    runs: int = 3,
    prefill_tokens: int = 512,
    decode_tokens: int = 64,
    api_key: str | None = None,
    skip_windows: int = 0,
) -> DepthFigures:
    """Fill slot 0 to ``depth`` once, then ``runs`` measured requests on top of it.

    ``skip_windows``: the runs' prompts start that many windows further into the token cycle (a
    warm-up request with ``skip_windows=runs`` leaves the slot holding a prompt no measured run
    starts with). A run whose prompt the slot already held beyond ``depth`` processed only the
    rest: its prefill is not counted (``cached_tokens`` records it); its decode is."""
    figures = DepthFigures(depth=depth)
    # Suffix ids: a window of the same cycle starting elsewhere for each run, so no run's first
    # new token is the one the slot already holds after the prefix.
    windows = runs + skip_windows
    pool = token_ids(base_url, depth + prefill_tokens * (windows + 1) + windows, api_key=api_key)
    prefix = pool[:depth]
    common: dict[str, Any] = {"cache_prompt": True, "id_slot": 0}
    if depth:
        try:
            request_json(
                base_url, "/completion", {**common, "prompt": prefix, "n_predict": 1},
                api_key=api_key, timeout=FILL_TIMEOUT_S,
            )  # fmt: skip
        except EndpointError as exc:
            figures.errors.append(f"filling {depth} tokens: {exc}")
            return figures
    for run in range(runs):
        start = depth + (run + skip_windows) * (prefill_tokens + 1)
        suffix = pool[start + 1 : start + 1 + prefill_tokens]
        body = {
            **common,
            "prompt": prefix + suffix,
            "n_predict": decode_tokens,
            "ignore_eos": True,
        }
        res = stream_post(
            base_url, "/completion", {**body, "stream": True, "timings_per_token": True},
            api_key=api_key, timeout=RUN_TIMEOUT_S,
        )  # fmt: skip
        if not res.ok or res.ttft is None:
            figures.errors.append(f"run {run + 1}: {res.error or 'no tokens'}")
            continue
        timings = res.timings or {}
        processed = int(timings.get("prompt_n", len(suffix)))
        cached = int(timings.get("cache_n", 0))
        figures.cached_tokens.append(cached)
        counted = prefilled(cached, depth)
        if counted:
            figures.prefill.values.append(processed / res.ttft)
        if res.decode_tok_s is not None:
            figures.decode.values.append(res.decode_tok_s)
        if timings.get("predicted_per_second"):
            figures.decode_server.values.append(float(timings["predicted_per_second"]))
        if timings.get("prompt_per_second") and counted:
            figures.prefill_server.values.append(float(timings["prompt_per_second"]))
        if "draft_n" in timings:
            figures.drafted.append(int(timings["draft_n"]))
            figures.accepted.append(int(timings.get("draft_n_accepted", 0)))
    return figures


def depths_for(
    slot_context: int, wanted: tuple[int, ...], *, prefill: int, decode: int
) -> list[int]:
    """The wanted depths that leave room for one run in a slot of ``slot_context`` tokens; a
    wanted depth beyond the slot becomes the deepest that fits (rounded down to 1024 tokens), so
    a 64k slot is measured near its end rather than not at all."""
    room = slot_context - prefill - decode - 1
    fits = sorted({d for d in wanted if 0 <= d <= room})
    if any(d > room for d in wanted) and room >= 0:
        deepest = room // 1024 * 1024 if room >= 1024 else room
        if not fits or deepest > fits[-1]:
            fits.append(deepest)
    return fits
