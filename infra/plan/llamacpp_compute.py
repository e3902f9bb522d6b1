"""llama.cpp compute buffers: the measured Vulkan estimate and the upper bound, per device."""

from __future__ import annotations

from typing import Literal

from infra.plan.deepseek4 import (
    AttentionShape,
    kv_layout,
    pad,
)
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs
from infra.plan.report import (
    MIB,
)


def compute_buffer_bytes(
    shape: AttentionShape, ctx_size: int, ubatch: int, *, flash_attn: bool = True
) -> int:
    """Estimated compute buffer of one backend holding the whole graph.

    llama.cpp reserves the graph of one ubatch: per token the logits (n_vocab), the residual
    stream and attention/FFN intermediates (a few n_embd, n_head x head, n_ff) in F32, plus the
    KQ mask over the context (F16, and its padded copy); without flash attention also one
    layer's KQ scores (n_head x context, F32). A 64 MiB floor covers the scheduler's fixed
    reservations. Over-estimates the small models of the calibration test (it prints both).
    """
    tokens = ubatch
    per_token = 4 * (
        shape.n_vocab + 8 * shape.n_embd + 3 * shape.n_head * shape.head_k + 3 * shape.n_ff
    )
    mask = 2 * 2 * pad(ctx_size) * tokens
    scores = 0 if flash_attn else 4 * max(shape.n_head, 1) * pad(ctx_size) * tokens
    return 64 * MIB + tokens * per_token + mask + scores


VULKAN_SLACK_BYTES = 256 * 1024
"""The fixed part of a Vulkan compute buffer (0.01-0.1 MiB measured), rounded up."""


def vulkan_compute_bytes(
    shape: AttentionShape,
    ctx_size: int,
    ubatch: int,
    device: Literal["gpu", "host"],
    copied_kv_bytes: int = 0,
) -> int:
    """A Vulkan compute buffer of llama-server b11434 with flash attention, as measured.

    Each of the GPU's and the host's buffers holds the F16 KQ mask (2 x context x ubatch bytes).
    Per token of the ubatch, the host's adds 4 x n_embd floats (the input embeddings and their
    copies); the GPU's adds the peak of the layer graph, max(6 x n_embd, 4 x n_ff + 2 x n_embd)
    floats (7 x n_embd with fewer than 8 heads), and, while layers stay on the CPU, a copy of the
    largest such layer's KV cache (`copied_kv_bytes`): llama.cpp runs a CPU layer's ubatch on
    the GPU too, and the allocator reuses that copy from one layer to the next.

    Measured on an H200 through Vulkan (tests/fixtures/gpu_gate/compute/): n_embd 512 to 2048,
    n_ff 256 to 4096, contexts 4k to 64k, ubatches 128 and 512, F16 and q8_0 caches, every
    layer on the GPU or one of two on the CPU; and llama43 with `-ngl 40` of 44 at q8_0.
    Never below a reserved buffer; at a 64k context within 2% on the host and 6% on the GPU
    (13% with a CPU layer), llama43's within 1%; small buffers up to 30% over.
    """
    mask = 2 * pad(ctx_size) * ubatch
    if device == "host":
        return mask + 4 * 4 * shape.n_embd * ubatch + VULKAN_SLACK_BYTES
    width = 7 if shape.n_head < 8 else 6
    peak = max(width * shape.n_embd, 4 * shape.n_ff + 2 * shape.n_embd)
    return mask + 4 * peak * ubatch + copied_kv_bytes + VULKAN_SLACK_BYTES


MEASURED_CACHE_TYPES = ("f16", "q8_0")
"""The KV cache types `vulkan_compute_bytes` was measured with on the GPU."""


def measured_gpu_graph(inputs: LlamaCppPlanInputs) -> bool:
    """Whether `vulkan_compute_bytes` was measured for this GPU graph (else the upper bound)."""
    return (
        inputs.compute_estimate == "vulkan"
        and inputs.attention.kind == "standard"
        and inputs.flash_attn
        and inputs.cache_type_k in MEASURED_CACHE_TYPES
        and inputs.cache_type_v in MEASURED_CACHE_TYPES
    )


# -- llama.cpp plan -------------------------------------------------------------------------


def graph_context(inputs: LlamaCppPlanInputs) -> int:
    """The KV cells one ubatch's graph attends over: a slot's cells (`n_ctx_seq`) with `-np` > 1
    and no `--kv-unified`, so the KQ mask in the compute buffers follows the per-slot context
    (measured through Vulkan at `-c 65536 -ub 512 -np 2`: 52.1 MiB on the GPU, 40.1 MiB on the
    host, the figures of a 32768-cell graph)."""
    return kv_layout(inputs.ctx_size, inputs.parallel, inputs.kv_unified).cells


def compute_estimate(inputs: LlamaCppPlanInputs) -> int:
    """The upper-bound compute buffer at the plan's settings and graph context."""
    return compute_buffer_bytes(
        inputs.attention,
        graph_context(inputs),
        min(inputs.ubatch, inputs.batch),
        flash_attn=inputs.flash_attn,
    )
