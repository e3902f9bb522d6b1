"""The generated models of the speed estimate's CPU measurements: dense llamas and qwen3moe
mixtures of experts, written with the standard library only (`infra.hub.gguf_stub`): the real
header and a data region of zeros (a sparse file; llama-server reads it with `--load-mode none` into
memory of its own, so every weight byte is really read at each token). The arithmetic of zeros
costs what any weights cost; the figures are llama-server's own timings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.hub.gguf_stub import (
    FLOAT32,
    INT32,
    STRING,
    Tensor,
    Value,
    array,
    f32,
    flag,
    header_bytes,
    text,
    u32,
    write_sparse,
)

_UNKNOWN, _NORMAL, _CONTROL, _BYTE = 2, 1, 3, 6
"""`gguf.TokenType` values."""


@dataclass(frozen=True)
class Shape:
    """A llama (n_expert 0) or qwen3moe model's sizes and its matrices' type."""

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    weight_type: str = "F16"
    n_expert: int = 0
    n_expert_used: int = 0

    @property
    def head_dim(self) -> int:
        """Per-head size."""
        return self.n_embd // self.n_head


SHAPES = {
    "dense-8x1024": Shape(8, 1024, 8, 8, 2816),
    "dense-24x512": Shape(24, 512, 8, 8, 1536),
    "dense-16x768-q8": Shape(16, 768, 12, 4, 2048, "Q8_0"),
    "moe-6x1024": Shape(6, 1024, 16, 4, 512, n_expert=16, n_expert_used=4),
    "moe-12x512": Shape(12, 512, 8, 2, 512, n_expert=32, n_expert_used=2),
}
"""Each shape by name: larger than a server CPU's L3 cache, so decode reads memory."""
GPU_SHAPES = {
    "dense-32x2048": Shape(32, 2048, 16, 8, 5632),
    "moe-16x1024": Shape(16, 1024, 16, 4, 1024, n_expert=64, n_expert_used=8),
    "dense-28x1536": Shape(28, 1536, 12, 4, 4096),
    "dense-20x2560-q8": Shape(20, 2560, 20, 4, 6912, "Q8_0"),
    "moe-24x1024": Shape(24, 1024, 16, 4, 768, n_expert=32, n_expert_used=4),
    "moe-12x2048": Shape(12, 2048, 32, 4, 1024, n_expert=16, n_expert_used=2),
    "dense-36x1792": Shape(36, 1792, 14, 2, 4864),
    "dense-16x3072-q8": Shape(16, 3072, 24, 8, 8192, "Q8_0"),
    "moe-20x1536": Shape(20, 1536, 12, 4, 640, n_expert=48, n_expert_used=6),
    "moe-28x768": Shape(28, 768, 12, 4, 512, n_expert=64, n_expert_used=8),
    "dense-8x8192": Shape(8, 8192, 64, 8, 28672),
    "moe-8x4096": Shape(8, 4096, 32, 8, 1024, n_expert=64, n_expert_used=8),
    "dense-24x2304": Shape(24, 2304, 18, 6, 6144),
    "dense-12x4096-q8": Shape(12, 4096, 32, 8, 11008, "Q8_0"),
    "moe-16x2048": Shape(16, 2048, 16, 4, 768, n_expert=32, n_expert_used=4),
    "moe-32x1024": Shape(32, 1024, 8, 2, 512, n_expert=64, n_expert_used=6),
    "dense-20x3072": Shape(20, 3072, 24, 8, 8192),
    "moe-24x1536": Shape(24, 1536, 12, 4, 768, n_expert=32, n_expert_used=4),
}
"""Larger shapes for a GPU run (GiBs of weights: a GPU's decode is launch-bound below that)."""
GPU_CALIBRATION = (
    "dense-32x2048", "moe-16x1024", "dense-28x1536", "dense-20x2560-q8", "moe-24x1024",
    "moe-12x2048",
)  # fmt: skip
"""The shapes of a GPU run the Vulkan factors are derived from: six of GiBs, dense and mixtures
of experts, F16 and Q8_0. The smaller ones only check (launch-bound on a GPU, their halves on the
host held in the CPU's cache)."""
GPU_CHECKS = ("dense-24x2304", "dense-12x4096-q8", "moe-16x2048", "moe-32x1024")
"""Shapes declared as checks before any run of them: measured in one call with
`GPU_CALIBRATION`'s shapes, on one machine, and estimated by the calibration fitted on that call's
runs of those (docs/memory-plan.md)."""

GPU_NEXT = ("dense-20x3072", "moe-24x1536")
"""Shapes not yet run, declared as checks before any run of them, for a second machine: run in
one call with `GPU_CALIBRATION`'s shapes and estimated by the calibration that call's runs of
those give."""

CALIBRATION = ("dense-8x1024", "dense-24x512")
"""The shapes the CPU factor is derived from; the others only check it."""


def _vocab() -> tuple[list[str], list[float], list[int]]:
    """tests/support/tiny_gguf's SentencePiece vocabulary: specials, byte tokens, ASCII."""
    tokens, types = ["<unk>", "<s>", "</s>"], [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_BYTE] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(pieces))]
    return tokens + pieces, scores, types + [_NORMAL] * len(pieces)


def _tensors(s: Shape, n_vocab: int) -> list[Tensor]:
    q, kv, w = s.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.weight_type
    out = [Tensor("token_embd.weight", (s.n_embd, n_vocab), w)]
    for i in range(s.n_layer):
        out += [
            Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "F32"),
            Tensor(f"blk.{i}.attn_q.weight", (s.n_embd, q), w),
            Tensor(f"blk.{i}.attn_k.weight", (s.n_embd, kv), w),
            Tensor(f"blk.{i}.attn_v.weight", (s.n_embd, kv), w),
            Tensor(f"blk.{i}.attn_output.weight", (q, s.n_embd), w),
            Tensor(f"blk.{i}.ffn_norm.weight", (s.n_embd,), "F32"),
        ]
        if s.n_expert:
            e = (s.n_embd, s.n_ff, s.n_expert)
            out += [
                Tensor(f"blk.{i}.attn_q_norm.weight", (s.head_dim,), "F32"),
                Tensor(f"blk.{i}.attn_k_norm.weight", (s.head_dim,), "F32"),
                Tensor(f"blk.{i}.ffn_gate_inp.weight", (s.n_embd, s.n_expert), "F32"),
                Tensor(f"blk.{i}.ffn_gate_exps.weight", e, w),
                Tensor(f"blk.{i}.ffn_up_exps.weight", e, w),
                Tensor(f"blk.{i}.ffn_down_exps.weight", (s.n_ff, s.n_embd, s.n_expert), w),
            ]
        else:
            out += [
                Tensor(f"blk.{i}.ffn_gate.weight", (s.n_embd, s.n_ff), w),
                Tensor(f"blk.{i}.ffn_up.weight", (s.n_embd, s.n_ff), w),
                Tensor(f"blk.{i}.ffn_down.weight", (s.n_ff, s.n_embd), w),
            ]
    out += [
        Tensor("output_norm.weight", (s.n_embd,), "F32"),
        Tensor("output.weight", (s.n_embd, n_vocab), w),
    ]
    return out


def shape_of(name: str) -> Shape:
    """A shape of `SHAPES` or `GPU_SHAPES` by name."""
    return SHAPES[name] if name in SHAPES else GPU_SHAPES[name]


def write_shape(directory: Path, name: str, context_length: int = 131072) -> Path:
    """`{name}.gguf` of one shape (of `SHAPES` or `GPU_SHAPES`) under `directory`."""
    s = shape_of(name)
    tokens, scores, types = _vocab()
    a = "qwen3moe" if s.n_expert else "llama"
    meta: list[tuple[str, Value]] = [
        ("general.architecture", text(a)),
        ("general.name", text(name)),
        ("general.file_type", u32(1 if s.weight_type == "F16" else 7)),
        (f"{a}.context_length", u32(context_length)),
        (f"{a}.embedding_length", u32(s.n_embd)),
        (f"{a}.block_count", u32(s.n_layer)),
        (f"{a}.feed_forward_length", u32(s.n_ff)),
        (f"{a}.attention.head_count", u32(s.n_head)),
        (f"{a}.attention.head_count_kv", u32(s.n_head_kv)),
        (f"{a}.attention.layer_norm_rms_epsilon", f32(1e-5)),
        (f"{a}.rope.freq_base", f32(10000.0)),
    ]
    if s.n_expert:
        meta += [
            (f"{a}.attention.key_length", u32(s.head_dim)),
            (f"{a}.attention.value_length", u32(s.head_dim)),
            (f"{a}.expert_count", u32(s.n_expert)),
            (f"{a}.expert_used_count", u32(s.n_expert_used)),
            (f"{a}.expert_feed_forward_length", u32(s.n_ff)),
        ]
    else:
        meta += [(f"{a}.rope.dimension_count", u32(s.head_dim))]
    meta += [
        ("tokenizer.ggml.model", text("llama")),
        ("tokenizer.ggml.tokens", array(STRING, tokens)),
        ("tokenizer.ggml.scores", array(FLOAT32, scores)),
        ("tokenizer.ggml.token_type", array(INT32, types)),
        ("tokenizer.ggml.unknown_token_id", u32(0)),
        ("tokenizer.ggml.bos_token_id", u32(1)),
        ("tokenizer.ggml.eos_token_id", u32(2)),
        ("tokenizer.ggml.add_bos_token", flag(True)),
        ("tokenizer.ggml.add_eos_token", flag(False)),
    ]
    header, data = header_bytes(meta, _tensors(s, len(tokens)))
    return write_sparse(directory / f"{name}.gguf", header, len(header) + data)
