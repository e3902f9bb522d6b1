"""The GPU KV cache of a vLLM server in tokens and requests, as vLLM 0.33 counts it at start-up.

vLLM logs `GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X`
(`vllm/v1/core/kv_cache_utils.py`, `update_kv_cache_capacity`). It takes X from
`get_max_concurrency_for_kv_cache_config`: the pool's pages divided by the pages one request of
`--max-model-len` tokens takes, summed over the model's caches (`cdiv(max_memory_usage_bytes,
page_size_bytes)` of each group's spec), and N from `get_kv_cache_capacity` as `int(X * L)`.
A cache that grows with the context takes `cdiv(L, block_size)` pages
(`FullAttentionSpec.max_memory_usage_bytes`); a sliding-window cache at most
`cdiv(min(window - 1 + in-flight tokens, L), block_size) + 1` pages
(`SlidingWindowSpec.max_admission_blocks_per_request`), the in-flight tokens being
`max_concurrent_batches * max_num_batched_tokens` (2 batches with async scheduling, vLLM's
default). Here the pool is the `--kv-cache-memory-bytes` budget and a request's pages are
counted in bytes, so X = budget / request bytes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from infra.plan.report import GIB, KvCapacity, fmt_size

IN_FLIGHT_BATCHES = 2
"""`VllmConfig.max_concurrent_batches` with async scheduling (on by default in vLLM 0.33)."""


@dataclass(frozen=True)
class KvCacheLayout:
    """One request's KV in vLLM's paged cache: the caches that grow with its length (in pages
    of `page_tokens` tokens, all layers together) and the sliding-window caches bounded by the
    window and the tokens in flight."""

    name: str
    """The model whose layout this is (the plan's `assumed:` line names it)."""
    page_tokens: int
    page_bytes: int
    """Bytes of one page of every context-growing cache of every layer, alignment included."""
    window_tokens: int
    window_page_tokens: int
    window_page_bytes: int
    """Bytes of one page of every layer's sliding-window cache."""
    derivation: str
    """What the figures count and where they come from (the `assumed:` line)."""

    @property
    def bytes_per_token(self) -> float:
        """KV bytes one more token of context takes (the context-growing caches)."""
        return self.page_bytes / self.page_tokens

    def window_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        """The sliding-window caches of one request (`max_admission_blocks_per_request`)."""
        tokens = min(self.window_tokens - 1 + in_flight_tokens, max_model_len)
        return (math.ceil(tokens / self.window_page_tokens) + 1) * self.window_page_bytes

    def request_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        """KV bytes of one request of `max_model_len` tokens, every cache together."""
        pages = math.ceil(max_model_len / self.page_tokens)
        return pages * self.page_bytes + self.window_bytes(max_model_len, in_flight_tokens)

    def longest_context(self, budget_bytes: int, in_flight_tokens: int) -> int:
        """The longest `--max-model-len` (whole pages) of which one request fits the budget."""
        room = budget_bytes - self.window_bytes(1 << 40, in_flight_tokens)
        return max(room // self.page_bytes, 0) * self.page_tokens


def _page(states: int, state_bytes: int, alignment: int) -> int:
    """One layer's page: its states, rounded up to the backend's alignment
    (`_apply_alignment_padding` in `vllm/v1/kv_cache_interface.py`)."""
    return -(-states * state_bytes // alignment) * alignment


# DeepSeek V4 as vLLM 0.33 lays out its cache (`vllm/models/deepseek_v4/attention.py`,
# `compressor.py`, `vllm/v1/attention/backends/mla/sparse_swa.py`): fp8_ds_mla (vLLM's format
# for this model; any fp8 `--kv-cache-dtype` becomes it), 584 bytes per stored state
# (448 NoPE + 128 RoPE + 8 scale), pages aligned to 576 bytes; 256-token pages for the
# compressed caches, 64-token pages for the sliding window. DeepSeek-V4-Flash: 43 layers, a
# 128-token window on each, 21 layers compressed 4x (each with a 4x indexer cache of 128 fp8 +
# 4 scale bytes per state), 20 layers compressed 128x.
_DSV4_STATE, _DSV4_INDEXER_STATE, _DSV4_ALIGN, _DSV4_PAGE = 584, 132, 576, 256
DEEPSEEK_V4_FLASH = KvCacheLayout(
    name="DeepSeek-V4-Flash",
    page_tokens=_DSV4_PAGE,
    page_bytes=21 * _page(_DSV4_PAGE // 4, _DSV4_STATE, _DSV4_ALIGN)
    + 21 * _page(_DSV4_PAGE // 4, _DSV4_INDEXER_STATE, _DSV4_ALIGN)
    + 20 * _page(_DSV4_PAGE // 128, _DSV4_STATE, _DSV4_ALIGN),
    window_tokens=128,
    window_page_tokens=64,
    window_page_bytes=43 * _page(64, _DSV4_STATE, _DSV4_ALIGN),
    derivation=(
        "fp8_ds_mla, 584 B a state in 576-byte-aligned pages: 21 layers compressed 4x with "
        "their indexer cache, 20 compressed 128x, a 128-token window on all 43"
    ),
)

KV_LAYOUTS = {re.compile(r"deepseek-v4-flash", re.IGNORECASE): DEEPSEEK_V4_FLASH}
"""The KV layouts the plan knows, by the checkpoint's repo name."""


def kv_layout_of(repo: str) -> KvCacheLayout | None:
    """The KV layout of a checkpoint (by its repo name), or None when the plan has none."""
    return next((layout for name, layout in KV_LAYOUTS.items() if name.search(repo)), None)


def layout_assumption(layout: KvCacheLayout) -> str:
    """The `assumed:` line of a KV layout taken from vLLM's source rather than the model's
    config (the lock does not record a safetensors checkpoint's config.json)."""
    return (
        f"KV bytes per token: {layout.name} as vLLM 0.33 allocates it "
        f"({layout.derivation}; {layout.bytes_per_token:,.0f} B a context token): from vLLM's "
        "source, not this checkpoint's config.json; compressor state and a draft model's "
        "cache are not counted"
    )


def kv_capacity(
    layout: KvCacheLayout | None,
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    budget_bytes: int,
    cpu_tier_bytes: int,
) -> KvCapacity:
    """What the GPU KV budget holds at `max_model_len` (vLLM's start-up figures) and what the
    CPU KV tier holds (prefix-cache blocks moved out of HBM)."""
    if layout is None:
        return KvCapacity(max_model_len, budget_bytes, cpu_tier_bytes)
    in_flight = IN_FLIGHT_BATCHES * max_num_batched_tokens
    request = layout.request_bytes(max_model_len, in_flight)
    concurrency = budget_bytes / request
    return KvCapacity(
        max_model_len,
        budget_bytes,
        cpu_tier_bytes,
        gpu_tokens=int(concurrency * max_model_len),
        max_concurrency=concurrency,
        request_bytes=request,
        bytes_per_token=layout.bytes_per_token,
        cpu_tier_tokens=int(cpu_tier_bytes / layout.bytes_per_token),
        longest_context=layout.longest_context(budget_bytes, in_flight),
    )


def too_long_problem(capacity: KvCapacity) -> str | None:
    """vLLM's start-up refusal when one request of `--max-model-len` tokens does not fit the KV
    budget (`check_enough_kv_cache_memory`), with the context that fits."""
    if capacity.max_concurrency is None or capacity.max_concurrency >= 1:
        return None
    return (
        f"plan: one request of {capacity.max_model_len:,} tokens needs "
        f"{fmt_size(capacity.request_bytes or 0)} of KV cache, more than the "
        f"{fmt_size(capacity.gpu_budget_bytes)} of server.kvCacheMemoryBytes (vLLM refuses to "
        f"start): lower server.maxModelLen to at most {capacity.longest_context} or raise "
        f"server.kvCacheMemoryBytes to at least "
        f"{math.ceil((capacity.request_bytes or 0) / GIB) * GIB}"
    )
