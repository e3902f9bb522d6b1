"""Header-only GGUF files: the real header (metadata and tensor table) at the real file size, the
data region never written (a sparse file), so a big model can be served by the stand-in hub and
locked, planned and rendered offline: `llm-infra lock` reads only headers.

- `copy_header(source, target)`: a header-only copy of a GGUF file at hand, or of one on a hub
  (read with HTTP Range requests, as the lock reads it): byte for byte up to where the tensor
  data starts, then the file's size (at hand) or the size its tensor table declares (a URL).
- `write_sample(root)`: a header-only model of Qwen3-30B-A3B's shape at Q4_K_M
  (`SAMPLE_REPO`/`SAMPLE_FILE`), written from its shape here, for trying things with no network.

Standard library only, like `components.gguf_header`, which reads these files back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.gguf_header import (
    DEFAULT_ALIGNMENT,
    GGML_TYPE_IDS,
    GgufHeader,
    Readable,
    check_layers,
    read_gguf_header,
    stream_size,
    tensor_nbytes,
)

# GGUF metadata value types.
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
_FORMATS = {UINT32: "<I", INT32: "<i", FLOAT32: "<f", BOOL: "<?"}


@dataclass(frozen=True)
class Value:
    """A typed GGUF metadata value (an array: `kind` ARRAY, `element` its elements' type)."""

    kind: int
    value: Any
    element: int | None = None


def u32(value: int) -> Value:
    """A uint32 value."""
    return Value(UINT32, value)


def f32(value: float) -> Value:
    """A float32 value."""
    return Value(FLOAT32, value)


def text(value: str) -> Value:
    """A string value."""
    return Value(STRING, value)


def flag(value: bool) -> Value:
    """A bool value."""
    return Value(BOOL, value)


def array(element: int, values: list[Any]) -> Value:
    """An array of one element type."""
    return Value(ARRAY, values, element)


@dataclass(frozen=True)
class Tensor:
    """A tensor of the table: name, shape in ggml order (`ne`), type name (`Q4_K`)."""

    name: str
    dims: tuple[int, ...]
    type_name: str

    @property
    def nbytes(self) -> int:
        """Bytes of its data."""
        return tensor_nbytes(GGML_TYPE_IDS[self.type_name.lower()], self.dims)


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack("<Q", len(data)) + data


def _scalar(kind: int, value: Any) -> bytes:
    return _string(value) if kind == STRING else struct.pack(_FORMATS[kind], value)


def _value(item: Value) -> bytes:
    if item.kind != ARRAY:
        return _scalar(item.kind, item.value)
    assert item.element is not None
    head = struct.pack("<IQ", item.element, len(item.value))
    return head + b"".join(_scalar(item.element, v) for v in item.value)


def _pad(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def header_bytes(
    metadata: Iterable[tuple[str, Value]], tensors: list[Tensor], alignment: int = DEFAULT_ALIGNMENT
) -> tuple[bytes, int]:
    """A GGUF v3 header padded to the alignment, and the size of the data region after it
    (each tensor padded to the alignment, as llama.cpp's writers lay them out)."""
    entries = list(metadata)
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(entries))]
    for key, item in entries:
        out += [_string(key), struct.pack("<I", item.kind), _value(item)]
    offset = 0
    for tensor in tensors:
        type_id = GGML_TYPE_IDS[tensor.type_name.lower()]
        out += [_string(tensor.name), struct.pack("<I", len(tensor.dims))]
        out += [struct.pack("<Q", dim) for dim in tensor.dims]
        out += [struct.pack("<IQ", type_id, offset)]
        offset += _pad(tensor.nbytes, alignment)
    header = b"".join(out)
    return header + bytes(_pad(len(header), alignment) - len(header)), offset


def write_sparse(target: Path, header: bytes, size: int) -> Path:
    """Write the header and extend the file to `size` without writing the rest (a hole on
    every filesystem that has them; reads return zeros)."""
    if size < len(header):
        raise ValueError(f"{target}: size {size} is smaller than its header ({len(header)} bytes)")
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp")
    try:
        with temporary.open("wb") as handle:
            handle.write(header)
            handle.truncate(size)
        temporary.replace(target)
    except BaseException:
        # A full disk or a file-size limit leaves no half-written copy behind.
        temporary.unlink(missing_ok=True)
        raise
    return target


class _Recorder:
    """A stream that keeps every byte read through it."""

    def __init__(self, stream: Readable) -> None:
        self.stream = stream
        self.data = bytearray()
        self.size = stream_size(stream)

    def read(self, n: int = -1, /) -> bytes:
        block = self.stream.read(n)
        self.data += block
        return block


def declared_size(header: GgufHeader) -> int:
    """The file size a header's tensor table declares: its data region ends with the last
    tensor, padded to the alignment."""
    end = max((t.offset + t.nbytes for t in header.tensors), default=0)
    return header.data_offset + _pad(end, header.alignment)


def copy_header(source: Readable, target: Path, size: int | None = None) -> tuple[Path, int]:
    """A header-only copy of the GGUF read from `source`: the same bytes up to where the tensor
    data starts, at `size` (default: the size the tensor table declares). Returns the path and
    the size."""
    recorder = _Recorder(source)
    header = read_gguf_header(recorder)
    check_layers(header)
    padding = header.data_offset - len(recorder.data)
    whole = declared_size(header) if size is None else size
    if whole < declared_size(header):
        raise ValueError(
            f"the file has {whole} bytes, less than its tensor table declares "
            f"({declared_size(header)}): a truncated download?"
        )
    return write_sparse(target, bytes(recorder.data) + bytes(padding), whole), whole


# -- the sample: Qwen3-30B-A3B's shape (its config.json and llama.cpp's qwen3moe tensors) -----

SAMPLE_REPO = "Qwen/Qwen3-30B-A3B-GGUF"
SAMPLE_FILE = "Qwen3-30B-A3B-Q4_K_M.gguf"


@dataclass(frozen=True)
class Qwen3MoeShape:
    """The shape of a qwen3moe model (Qwen3-30B-A3B's by default)."""

    n_layer: int = 48
    n_embd: int = 2048
    n_head: int = 32
    n_head_kv: int = 4
    head_dim: int = 128
    n_ff: int = 6144
    n_expert: int = 128
    n_expert_used: int = 8
    n_ff_expert: int = 768
    n_vocab: int = 151936
    context_length: int = 40960
    rope_freq_base: float = 1_000_000.0
    rms_eps: float = 1e-6


def _more_bits(layer: int, n_layer: int) -> bool:
    # llama.cpp's Q4_K_M gives attn_v and ffn_down Q6_K on these layers (`use_more_bits`).
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def qwen3moe_tensors(shape: Qwen3MoeShape) -> list[Tensor]:
    """The tensor table llama.cpp's qwen3moe loader reads, with Q4_K_M's types."""
    s = shape
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    tensors = [Tensor("token_embd.weight", (s.n_embd, s.n_vocab), "Q4_K")]
    for i in range(s.n_layer):
        wide = "Q6_K" if _more_bits(i, s.n_layer) else "Q4_K"
        tensors += [
            Tensor(f"blk.{i}.attn_norm.weight", (s.n_embd,), "F32"),
            Tensor(f"blk.{i}.attn_q.weight", (s.n_embd, q), "Q4_K"),
            Tensor(f"blk.{i}.attn_k.weight", (s.n_embd, kv), "Q4_K"),
            Tensor(f"blk.{i}.attn_v.weight", (s.n_embd, kv), wide),
            Tensor(f"blk.{i}.attn_output.weight", (q, s.n_embd), "Q4_K"),
            Tensor(f"blk.{i}.attn_q_norm.weight", (s.head_dim,), "F32"),
            Tensor(f"blk.{i}.attn_k_norm.weight", (s.head_dim,), "F32"),
            Tensor(f"blk.{i}.ffn_norm.weight", (s.n_embd,), "F32"),
            Tensor(f"blk.{i}.ffn_gate_inp.weight", (s.n_embd, s.n_expert), "F32"),
            Tensor(f"blk.{i}.ffn_gate_exps.weight", (s.n_embd, s.n_ff_expert, s.n_expert), "Q4_K"),
            Tensor(f"blk.{i}.ffn_up_exps.weight", (s.n_embd, s.n_ff_expert, s.n_expert), "Q4_K"),
            Tensor(f"blk.{i}.ffn_down_exps.weight", (s.n_ff_expert, s.n_embd, s.n_expert), wide),
        ]
    tensors += [
        Tensor("output_norm.weight", (s.n_embd,), "F32"),
        Tensor("output.weight", (s.n_embd, s.n_vocab), "Q6_K"),
    ]
    return tensors


CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, as Qwen3's template frames messages (without its tool and thinking parts)."""


def qwen3moe_metadata(shape: Qwen3MoeShape, name: str) -> list[tuple[str, Value]]:
    """The metadata llama.cpp's converter writes for a qwen3moe model; the tokenizer's
    tokens are stand-ins of the real count (the plan reads only how many there are)."""
    a = "qwen3moe"
    tokens = [f"<|token_{i}|>" for i in range(shape.n_vocab)]
    return [
        ("general.architecture", text(a)),
        ("general.type", text("model")),
        ("general.name", text(name)),
        ("general.size_label", text("30B-A3B")),
        ("general.file_type", u32(15)),  # MOSTLY_Q4_K_M
        ("general.quantization_version", u32(2)),
        (f"{a}.block_count", u32(shape.n_layer)),
        (f"{a}.context_length", u32(shape.context_length)),
        (f"{a}.embedding_length", u32(shape.n_embd)),
        (f"{a}.feed_forward_length", u32(shape.n_ff)),
        (f"{a}.attention.head_count", u32(shape.n_head)),
        (f"{a}.attention.head_count_kv", u32(shape.n_head_kv)),
        (f"{a}.attention.key_length", u32(shape.head_dim)),
        (f"{a}.attention.value_length", u32(shape.head_dim)),
        (f"{a}.attention.layer_norm_rms_epsilon", f32(shape.rms_eps)),
        (f"{a}.rope.freq_base", f32(shape.rope_freq_base)),
        (f"{a}.expert_count", u32(shape.n_expert)),
        (f"{a}.expert_used_count", u32(shape.n_expert_used)),
        (f"{a}.expert_feed_forward_length", u32(shape.n_ff_expert)),
        ("tokenizer.ggml.model", text("gpt2")),
        ("tokenizer.ggml.pre", text("qwen2")),
        ("tokenizer.ggml.tokens", array(STRING, tokens)),
        ("tokenizer.ggml.token_type", array(INT32, [1] * shape.n_vocab)),
        ("tokenizer.ggml.eos_token_id", u32(151645)),
        ("tokenizer.ggml.padding_token_id", u32(151643)),
        ("tokenizer.ggml.bos_token_id", u32(151643)),
        ("tokenizer.ggml.add_bos_token", flag(False)),
        ("tokenizer.chat_template", text(CHAT_TEMPLATE)),
    ]


def write_sample(root: Path) -> Path:
    """The sample model as a header-only file under a hub directory:
    `ROOT/Qwen/Qwen3-30B-A3B-GGUF/Qwen3-30B-A3B-Q4_K_M.gguf` (~17 GiB, nearly all of it a hole)."""
    shape = Qwen3MoeShape()
    header, data = header_bytes(qwen3moe_metadata(shape, "Qwen3 30B A3B"), qwen3moe_tensors(shape))
    return write_sparse(root / SAMPLE_REPO / SAMPLE_FILE, header, len(header) + data)
