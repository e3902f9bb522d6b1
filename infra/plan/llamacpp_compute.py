"""llama.cpp compute buffers: the measured Vulkan and CPU estimates and the upper bound."""

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
    fmt_size,
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


def cpu_activation_floats(shape: AttentionShape) -> int:
    """F32 values per ubatch token at the peak of llama-server b11434's CPU graph (flash
    attention), as measured: ggml-alloc reuses a finished tensor's bytes, so the peak is the
    widest FFN point of a layer in the middle of the model, not a sum over the graph.

    With n_embd E and an FFN width X (n_ff; a mixture of experts' n_expert_used x n_ff_exp):
    3X + 5E (the gate, up and activation outputs beside the residual stream, the normed input
    and the blocks the attention left), and 2X + 5E when X <= E (one intermediate fits in a
    block the attention freed); never below 7E (the attention's own peak). gpt-oss adds an
    n_embd per expert used (the biased expert outputs); gemma2/gemma3 peak at 6E and 2X + 4E
    for narrow FFNs; a mixture of experts' leading dense blocks (glm4moe's first) run before the
    allocator has freed any block: F + 7E, at least 8E, while F <= E + n_head x head_k, else
    3F + 5E (over by up to half where measured, never under). Plus 16 values of token ids, positions
    and cache indices.
    """
    e = shape.n_embd
    arch = shape.architecture
    gemma = arch in ("gemma2", "gemma3")
    base = (3 + shape.n_expert_used) * e if arch == "gpt-oss" else 5 * e

    def ffn(width: int) -> int:
        if width <= e:
            return 2 * width + (4 * e if gemma else base)
        return 3 * width + base

    peaks = [6 * e if gemma else 7 * e, ffn(shape.n_ff)]
    if shape.n_ff_dense:
        dense = shape.n_ff_dense
        q = shape.n_head * shape.head_k
        peaks.append(max(8 * e, dense + 7 * e) if dense <= e + q else 3 * dense + 5 * e)
    return max(peaks) + 16


def swa_graph_cells(inputs: LlamaCppPlanInputs) -> int:
    """The cells of the sliding-window layers' KQ mask (their own cache: the window per
    sequence plus a ubatch, padded; the whole slot with `--swa-full`); 0 without such layers."""
    shape = inputs.attention
    if not any(shape.swa_layers):
        return 0
    cells = graph_context(inputs)
    if inputs.swa_full:
        return cells
    seqs = inputs.parallel if inputs.kv_unified else 1
    return pad(min(cells, shape.sliding_window * seqs + min(inputs.ubatch, inputs.batch)))


def cpu_compute_bytes(inputs: LlamaCppPlanInputs) -> int:
    """The CPU compute buffer of llama-server b11434 (`sched_reserve: CPU compute buffer size`)
    for llama-style attention with flash attention, as measured (tests/contract/
    test_plan_architectures.py; docs/memory-plan.md has the table).

    The graph of one ubatch (T tokens, never more than the context): the F16 KQ mask over a
    slot's cells (2 x cells x T bytes), a second one over the sliding-window cache when some
    layers attend through a window, the layer peak (`cpu_activation_floats` x 4 x T bytes) and
    the logits of one output per slot (n_vocab x `-np` floats)."""
    shape = inputs.attention
    layout = kv_layout(inputs.ctx_size, inputs.parallel, inputs.kv_unified)
    tokens = min(inputs.ubatch, inputs.batch, layout.n_ctx)
    masks = 2 * (graph_context(inputs) + swa_graph_cells(inputs)) * tokens
    logits = 4 * shape.n_vocab * inputs.parallel
    return masks + 4 * cpu_activation_floats(shape) * tokens + logits


def measured_cpu_graph(inputs: LlamaCppPlanInputs) -> bool:
    """Whether `cpu_compute_bytes` was measured for this graph (else the upper bound)."""
    standard = inputs.attention.kind == "standard"
    return inputs.compute_estimate == "cpu" and standard and inputs.flash_attn


def cpu_compute_assumptions(inputs: LlamaCppPlanInputs, cpu_compute: int) -> list[str]:
    """The plan's `assumed:` line for a CPU runtime whose graph was not measured."""
    if inputs.compute_estimate != "cpu" or measured_cpu_graph(inputs):
        return []
    if "ram" in inputs.compute_override_bytes:
        return []
    return [
        "compute buffers: measured on the CPU for llama-style attention with flash attention "
        f"only, so the CPU's {fmt_size(cpu_compute)} is the upper bound (one ubatch's whole "
        "graph; set memory.computeGib from a real load's `sched_reserve: CPU compute buffer "
        "size` line)"
    ]


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
    """The compute buffer of a device running the whole graph at the plan's settings: the CPU's
    as measured (`cpu_compute_bytes`) where it was, else the upper bound."""
    if measured_cpu_graph(inputs):
        return cpu_compute_bytes(inputs)
    return compute_buffer_bytes(
        inputs.attention,
        graph_context(inputs),
        min(inputs.ubatch, inputs.batch),
        flash_attn=inputs.flash_attn,
    )
