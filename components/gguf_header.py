# Just over ~400 lines: the header reader and its planning summary share the type tables and
# run as one stdlib file over local files and HTTP Range reads alike.
"""Read the header of a GGUF file (metadata and tensor infos) without touching the weights.

Standard library only: the same code runs in a stock Python image and over HTTP Range reads
(any object with `read(n) -> bytes` works; nothing is ever seeked). `read_gguf_header` reads
the magic, version, metadata and tensor infos of GGUF v2/v3 and stops where the tensor data
begins. Metadata arrays of 64 or more elements (the tokenizer's vocab, merges, scores) are read
past and not stored; only their element count is kept.

`summarize(headers)` turns the headers of one (split) model into the summary that model lock
files store and the memory planner reads. Schema (version 3), every value JSON-native:

    {
      "schema": 3,
      "architecture": "deepseek4",        # general.architecture
      "metadata": {                       # planning subset, GGUF key -> value
        "deepseek4.block_count": 43,      # {arch}.block_count, context_length,
        "deepseek4.attention.key_length": 512,   # embedding_length, feed_forward_length,
        ...                               # vocab_size, nextn_predict_layers, attention.*,
      },                                  # rope.*, expert_*, ...; every {arch}.* key for
                                          # deepseek4; general.file_type, general.alignment
      "vocab_size": 129280,               # tokenizer.ggml.tokens length (or null)
      "layer_bytes": [2150000000, ...],   # tensor bytes of blk.N.*, index N
      "other_tensors": {"token_embd.weight": 1234, "output.weight": 5678, ...},
      "total_bytes": 93400000000,         # sum of every tensor's bytes, all shards
      "tensor_count": 1234,               # tensors in all shards
      "matmul_weights": {                 # (schema 2) the 2-D and 3-D weights of a layer
        "0": {"Q4_K 4096x1024": 2, ...},  # ("output": the non-layer ones but token_embd),
        "output": {"Q6_K 4096x129280": 1} # "TYPE ne0xne1[xne2]" -> how many: what the CPU
      },                                  # repack rules read (infra/plan/repack.py)
      "tensors": {                        # (schema 3) every tensor by name: "TYPE ne0xne1..",
        "blk.0.ffn_up_exps.weight": "Q4_K 4096x1024x256", ...   # what tensor overrides
      }                                   # (`-ot`, `--n-cpu-moe`) move, by llama.cpp's regex
    }                                     # search on the names (infra/plan/overrides.py)

A schema 1 summary (no `matmul_weights`) still reads; the plan then says it cannot tell which
weights llama.cpp repacks and budgets the upper bound. A schema 1 or 2 summary (no `tensors`)
still reads; a stack that moves tensors by name then needs a new lock.

Tensor bytes are the tensors' own sizes (elements / block size x type size), without the
alignment padding between tensors in the file.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# Arrays this long or longer are per-token tables (vocab, merges, scores), never planning inputs.
MAX_STORED_ARRAY = 64
SUMMARY_SCHEMA = 3

# ggml type id -> (name, block size in elements, bytes per block), as gguf 0.19's
# `gguf.constants.GGML_QUANT_SIZES` (a unit test keeps the two equal).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}
GGML_TYPE_IDS: dict[str, int] = {name.lower(): tid for tid, (name, _, _) in GGML_TYPES.items()}

# GGUF metadata value type id -> struct format of a scalar; 8 = string, 9 = array.
_SCALARS: dict[int, str] = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_SKIP_CHUNK = 1 << 20

Scalar = int | float | bool | str
MetadataValue = Scalar | list[Scalar] | list[Any]

_LAYER = re.compile(r"^blk\.(\d+)\.")
# Tensors llama.cpp reads as the input layer (row lookups, never a matrix product).
INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.")
# {arch}.<suffix> keys the planner (and a reader of the lock) needs; deepseek4 keeps all.
_PLANNING_KEYS = (
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "expert_feed_forward_length", "expert_shared_feed_forward_length", "vocab_size",
    "nextn_predict_layers", "leading_dense_block_count",
)  # fmt: skip
_PLANNING_PREFIXES = ("attention.", "rope.", "expert_", "ssm.", "hyper_connection.")
_FULL_METADATA_ARCHS = ("deepseek4",)
_GENERAL_KEYS = ("general.architecture", "general.file_type", "general.alignment")


class GgufError(ValueError):
    """The stream is not a GGUF file this reader understands, or it ended early."""


class Readable(Protocol):
    """Anything with `read(n)`: a file, a socket file, an HTTP Range reader."""

    def read(self, n: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: its name, shape (ggml `ne` order), type and data offset."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        """Number of elements."""
        count = 1
        for dim in self.dims:
            count *= dim
        return count

    @property
    def type_name(self) -> str:
        """ggml type name, e.g. `Q8_0`."""
        return GGML_TYPES[self.ggml_type][0]

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data."""
        return tensor_nbytes(self.ggml_type, self.dims)


@dataclass(frozen=True)
class GgufHeader:
    """The header of one GGUF file."""

    version: int
    tensor_count: int
    metadata: dict[str, MetadataValue]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    """Byte offset where the tensor data starts (the header's length, padded to alignment)."""
    array_lengths: dict[str, int] = field(default_factory=dict)
    """Element count of every metadata array, including those not stored."""

    @property
    def architecture(self) -> str | None:
        """`general.architecture`, if present (split shards after the first may lack it)."""
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def tensor_bytes(self) -> int:
        """Sum of the tensors' data bytes."""
        return sum(t.nbytes for t in self.tensors)


def tensor_nbytes(ggml_type: int, dims: Sequence[int]) -> int:
    """Bytes of a tensor of this ggml type and shape."""
    if ggml_type not in GGML_TYPES:
        raise GgufError(f"unknown ggml type {ggml_type}")
    _, block, size = GGML_TYPES[ggml_type]
    count = 1
    for dim in dims:
        count *= dim
    if dims and dims[0] % block:
        raise GgufError(f"row of {dims[0]} elements is not a multiple of the block size {block}")
    return count // block * size


def row_bytes(type_name: str, n: int) -> int:
    """Bytes of a row of `n` elements of a ggml type given by name (`q8_0`, `f16`, ...)."""
    try:
        tid = GGML_TYPE_IDS[type_name.lower()]
    except KeyError:
        raise GgufError(f"unknown ggml type {type_name!r}") from None
    return tensor_nbytes(tid, (n,))


class _Reader:
    """Sequential little- or big-endian reads that count the bytes consumed."""

    def __init__(self, stream: Readable) -> None:
        self.stream = stream
        self.position = 0
        self.order = "<"

    def read(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) != n:
            raise GgufError(f"unexpected end of file at byte {self.position + len(data)}")
        self.position += n
        return data

    def skip(self, n: int) -> None:
        while n > 0:
            chunk = min(n, _SKIP_CHUNK)
            self.read(chunk)
            n -= chunk

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(self.order + fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length: int = self.unpack("Q")
        return self.read(length).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.skip(self.unpack("Q"))

    def value(self, vtype: int) -> Scalar:
        if vtype == _STRING:
            return self.string()
        if vtype not in _SCALARS:
            raise GgufError(f"unknown metadata value type {vtype} at byte {self.position}")
        value: Scalar = self.unpack(_SCALARS[vtype])
        return value

    def array(self) -> tuple[list[Any] | None, int]:
        """An array: its values if short (else None), and its element count."""
        etype: int = self.unpack("I")
        count: int = self.unpack("Q")
        if count < MAX_STORED_ARRAY:
            if etype == _ARRAY:
                return [self.array()[0] for _ in range(count)], count
            return [self.value(etype) for _ in range(count)], count
        if etype == _STRING:
            for _ in range(count):
                self.skip_string()
        elif etype == _ARRAY:
            for _ in range(count):
                self.array()
        elif etype in _SCALARS:
            self.skip(count * struct.calcsize(_SCALARS[etype]))
        else:
            raise GgufError(f"unknown array element type {etype} at byte {self.position}")
        return None, count


def read_gguf_header(stream: BinaryIO | Readable) -> GgufHeader:
    """Parse a GGUF header from the stream's current position, reading no tensor data."""
    reader = _Reader(stream)
    if reader.read(4) != GGUF_MAGIC:
        raise GgufError("not a GGUF file (bad magic)")
    raw_version = reader.read(4)
    version = struct.unpack("<I", raw_version)[0]
    if version & 0xFFFF == 0:
        # A big-endian file: its version reads as a large little-endian number.
        reader.order = ">"
        version = struct.unpack(">I", raw_version)[0]
    if version not in (2, 3):
        raise GgufError(f"unsupported GGUF version {version} (supported: 2, 3)")
    tensor_count: int = reader.unpack("Q")
    kv_count: int = reader.unpack("Q")
    metadata: dict[str, MetadataValue] = {}
    array_lengths: dict[str, int] = {}
    for _ in range(kv_count):
        key = reader.string()
        vtype: int = reader.unpack("I")
        if vtype == _ARRAY:
            values, count = reader.array()
            array_lengths[key] = count
            if values is not None:
                metadata[key] = values
        else:
            metadata[key] = reader.value(vtype)
    tensors = []
    for _ in range(tensor_count):
        name = reader.string()
        n_dims: int = reader.unpack("I")
        dims = tuple(int(reader.unpack("Q")) for _ in range(n_dims))
        ggml_type: int = reader.unpack("I")
        offset: int = reader.unpack("Q")
        tensors.append(TensorInfo(name=name, dims=dims, ggml_type=ggml_type, offset=offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        raise GgufError(f"general.alignment {alignment!r} is not a positive integer")
    data_offset = -(-reader.position // alignment) * alignment
    return GgufHeader(
        version=version,
        tensor_count=tensor_count,
        metadata=metadata,
        tensors=tuple(tensors),
        alignment=alignment,
        data_offset=data_offset,
        array_lengths=array_lengths,
    )


def _planning_key(key: str, arch: str) -> bool:
    if key in _GENERAL_KEYS:
        return True
    prefix = f"{arch}."
    if not key.startswith(prefix):
        return False
    if arch in _FULL_METADATA_ARCHS:
        return True
    suffix = key[len(prefix) :]
    return suffix in _PLANNING_KEYS or suffix.startswith(_PLANNING_PREFIXES)


def _jsonable(value: MetadataValue) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        # NaN and the infinities are not JSON (a lock file would hold null, and a summary read
        # back would never equal the one resolved).
        return None
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def summarize(headers: Sequence[GgufHeader]) -> dict[str, Any]:
    """The JSON-able planning summary of a (split) model (schema in the module docstring)."""
    if not headers:
        raise GgufError("no GGUF headers to summarize")
    first = next((h for h in headers if h.architecture), headers[0])
    arch = first.architecture
    if arch is None:
        raise GgufError("no shard has general.architecture")
    metadata: Mapping[str, MetadataValue] = first.metadata
    subset = {k: _jsonable(v) for k, v in sorted(metadata.items()) if _planning_key(k, arch)}
    layer_bytes: dict[int, int] = {}
    other: dict[str, int] = {}
    matmul: dict[str, dict[str, int]] = {}
    tensors: dict[str, str] = {}
    tensor_count = 0
    for header in headers:
        tensor_count += len(header.tensors)
        for tensor in header.tensors:
            tensors[tensor.name] = tensor_key(tensor.type_name, tensor.dims)
            match = _LAYER.match(tensor.name)
            if match:
                index = int(match[1])
                layer_bytes[index] = layer_bytes.get(index, 0) + tensor.nbytes
            else:
                other[tensor.name] = other.get(tensor.name, 0) + tensor.nbytes
            # Matrix weights (2-D, or 3-D experts); the input layer's lookup table is none.
            if len(tensor.dims) in (2, 3) and not tensor.name.startswith(INPUT_TENSORS):
                where = matmul.setdefault(match[1] if match else "output", {})
                key = tensor_key(tensor.type_name, tensor.dims)
                where[key] = where.get(key, 0) + 1
    block_count = metadata.get(f"{arch}.block_count")
    n_layers = max([*layer_bytes, -1]) + 1
    if isinstance(block_count, int) and not isinstance(block_count, bool):
        n_layers = max(n_layers, block_count)
    vocab = first.array_lengths.get("tokenizer.ggml.tokens")
    if vocab is None and isinstance(metadata.get(f"{arch}.vocab_size"), int):
        vocab = int(metadata[f"{arch}.vocab_size"])  # type: ignore[arg-type]
    return {
        "schema": SUMMARY_SCHEMA,
        "architecture": arch,
        "metadata": subset,
        "vocab_size": vocab,
        "layer_bytes": [layer_bytes.get(i, 0) for i in range(n_layers)],
        "other_tensors": dict(sorted(other.items())),
        "total_bytes": sum(layer_bytes.values()) + sum(other.values()),
        "tensor_count": tensor_count,
        "matmul_weights": {
            where: dict(sorted(matmul[where].items()))
            for where in sorted(matmul, key=lambda w: (w == "output", int(w) if w.isdigit() else 0))
        },
        "tensors": dict(sorted(tensors.items())),
    }


def tensor_key(type_name: str, dims: Sequence[int]) -> str:
    """A tensor's type and shape as a summary writes them: `Q4_K 4096x1024`."""
    return f"{type_name} {'x'.join(str(d) for d in dims)}"


def tensor_key_bytes(key: str) -> int:
    """Bytes of a tensor given as `tensor_key` writes it."""
    type_name, _, shape = key.partition(" ")
    if type_name.lower() not in GGML_TYPE_IDS or not re.fullmatch(r"[0-9]+(x[0-9]+)*", shape):
        raise GgufError(f"{key!r} is not `TYPE ne0xne1...`")
    return tensor_nbytes(GGML_TYPE_IDS[type_name.lower()], [int(d) for d in shape.split("x")])
