"""GGUF headers written to exhaust a reader's memory or time, or to make it fail badly: each a
real file layout with one declared count, length, type or value out of bounds.

`HOSTILE_HEADERS` maps a case's name to (the file's bytes, what its error must name). Every
case is small on disk (a header and some padding): the bounds are what a reader believes, not
what it downloads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

U8, I32, U32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = 0, 5, 4, 6, 7, 8, 9, 10, 11, 12
F32_TYPE, BIG = 0, 1 << 40
PADDING = 64 * 1024


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, vtype: int, value: bytes) -> bytes:
    return string(key) + struct.pack("<I", vtype) + value


def tensor(
    name: str, dims: tuple[int, ...] = (32,), ggml_type: int = F32_TYPE, offset: int = 0
) -> bytes:
    return (
        string(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def gguf(
    kvs: list[bytes],
    tensors: list[bytes],
    *,
    kv_count: int | None = None,
    tensor_count: int | None = None,
    padding: int = PADDING,
) -> bytes:
    head = b"GGUF" + struct.pack(
        "<IQQ",
        3,
        len(tensors) if tensor_count is None else tensor_count,
        len(kvs) if kv_count is None else kv_count,
    )
    return head + b"".join(kvs) + b"".join(tensors) + bytes(padding)


def arch(name: str = "llama") -> bytes:
    return kv("general.architecture", STRING, string(name))


def layers(count: int = 2, vtype: int = U32) -> bytes:
    fmt = {U32: "<I", U64: "<Q", I32: "<i"}[vtype]
    return kv("llama.block_count", vtype, struct.pack(fmt, count))


def model(*extra: bytes, tensors: list[bytes] | None = None, **counts: int) -> bytes:
    """A two-layer llama header with `extra` metadata, or other tensors."""
    default = [tensor("token_embd.weight", (32, 64)), tensor("blk.0.attn_norm.weight")]
    return gguf([arch(), layers(), *extra], default if tensors is None else tensors, **counts)


def nested(depth: int) -> bytes:
    value = struct.pack("<IQ", U8, 1) + b"\x00"
    for _ in range(depth - 1):
        value = struct.pack("<IQ", ARRAY, 1) + value
    return value


def _cases() -> dict[str, tuple[bytes, str]]:
    cases: dict[str, Callable[[], tuple[bytes, str]]] = {
        "block-count-2^40": lambda: (
            gguf([arch(), layers(BIG, U64)], [tensor("blk.0.attn_norm.weight")]),
            "llama.block_count",
        ),
        "block-count-negative": lambda: (
            gguf([arch(), layers(-1, I32)], [tensor("blk.0.attn_norm.weight")]),
            "llama.block_count",
        ),
        "layer-index-10^9": lambda: (
            model(tensors=[tensor("blk.1000000000.attn_norm.weight")]),
            "blk.1000000000.attn_norm.weight",
        ),
        "key-length-2^40": lambda: (
            gguf([arch(), struct.pack("<Q", BIG) + b"k" * 64], []),
            "metadata key #1",
        ),
        "string-length-2^40": lambda: (
            model(kv("general.name", STRING, struct.pack("<Q", BIG))),
            "general.name",
        ),
        "nested-arrays-3000": lambda: (
            model(kv("general.tags", ARRAY, nested(3000))),
            "general.tags",
        ),
        "array-u8-2^60": lambda: (
            model(kv("tokenizer.ggml.token_type", ARRAY, struct.pack("<IQ", U8, 1 << 60))),
            "tokenizer.ggml.token_type",
        ),
        "array-strings-2^40": lambda: (
            model(kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, BIG))),
            "tokenizer.ggml.tokens",
        ),
        "array-element-type-99": lambda: (
            model(kv("general.tags", ARRAY, struct.pack("<IQ", 99, 1))),
            "general.tags",
        ),
        "value-type-99": lambda: (model(kv("general.name", 99, b"")), "general.name"),
        "kv-count-2^60": lambda: (gguf([arch()], [], kv_count=1 << 60), "metadata key count"),
        "tensor-count-2^60": lambda: (gguf([arch()], [], tensor_count=1 << 60), "tensor count"),
        "ggml-type-99": lambda: (
            model(tensors=[tensor("blk.0.attn_norm.weight", ggml_type=99)]),
            "blk.0.attn_norm.weight",
        ),
        "dims-2^31": lambda: (
            model(tensors=[string("blk.0.attn_norm.weight") + struct.pack("<I", 1 << 31)]),
            "blk.0.attn_norm.weight",
        ),
        "shape-2^126": lambda: (
            model(tensors=[tensor("blk.0.ffn_up.weight", (1 << 63, 1 << 63))]),
            "blk.0.ffn_up.weight",
        ),
        "tensor-name-2^40": lambda: (
            model(tensors=[struct.pack("<Q", BIG) + b"blk.0"]),
            "tensor #0",
        ),
        "alignment-0": lambda: (
            model(kv("general.alignment", U32, struct.pack("<I", 0))),
            "general.alignment",
        ),
        "alignment-string": lambda: (
            model(kv("general.alignment", STRING, string("32"))),
            "general.alignment",
        ),
        "truncated": lambda: (model(padding=0)[:-20], "blk.0.attn_norm.weight"),
    }
    return {name: make() for name, make in cases.items()}


HOSTILE_HEADERS = _cases()


def full(**values: tuple[int, bytes]) -> bytes:
    """A complete two-layer llama header (what a plan needs), with some values replaced:
    `values` maps a key's suffix after `llama.` to (its value type, its packed value)."""
    keys: dict[str, tuple[int, bytes]] = {
        "block_count": (U32, struct.pack("<I", 2)),
        "context_length": (U32, struct.pack("<I", 4096)),
        "embedding_length": (U32, struct.pack("<I", 64)),
        "feed_forward_length": (U32, struct.pack("<I", 128)),
        "attention.head_count": (U32, struct.pack("<I", 4)),
        "attention.head_count_kv": (U32, struct.pack("<I", 4)),
        "attention.layer_norm_rms_epsilon": (F32, struct.pack("<f", 1e-5)),
        "rope.freq_base": (F32, struct.pack("<f", 10000.0)),
    }
    keys.update({k.replace("__", "."): v for k, v in values.items()})
    kvs = [arch(), *(kv(f"llama.{key}", vtype, value) for key, (vtype, value) in keys.items())]
    names = [
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_norm",
        "ffn_up",
        "ffn_down",
    ]
    tensors = [tensor("token_embd.weight", (64, 256)), tensor("output_norm.weight", (64,))]
    offset = 0
    for layer in range(2):
        for name in names:
            dims = (64,) if name.endswith("norm") else (64, 64)
            tensors.append(tensor(f"blk.{layer}.{name}.weight", dims, offset=offset))
            offset += 4 * 64 * dims[-1]
    return gguf(kvs, tensors)


def _value_cases() -> dict[str, tuple[bytes, str]]:
    """Headers that read cleanly but carry values no model has: refused by the summary every
    lock and plan makes, naming the key and where it starts."""
    huge = (U64, struct.pack("<Q", 1 << 63))
    return {
        "architecture-shell": (
            gguf(
                [arch("x$(touch pwned)"), kv("x.block_count", U32, struct.pack("<I", 2))],
                [tensor("blk.0.attn_norm.weight")],
            ),
            "general.architecture",
        ),
        "context-length-2^63": (full(context_length=huge), "llama.context_length"),
        "head-count-kv-2^63": (
            full(attention__head_count_kv=huge),
            "llama.attention.head_count_kv",
        ),
        "vocab-size-2^63": (full(vocab_size=huge), "llama.vocab_size"),
    }


VALUE_HEADERS = _value_cases()
"""Cases a header copy (`hub stub`) keeps as they are: only a summary refuses them."""
HOSTILE_HEADERS.update(VALUE_HEADERS)
