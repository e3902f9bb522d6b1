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
import os
import re
import stat
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from components.llama_archs import unknown_architecture

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
ARCHITECTURE_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"
"""A `general.architecture` as llama.cpp names them (`deepseek4`, `gpt-oss`): the one grammar
the reader, the lock and `model.architecture` hold it to."""
_ARCHITECTURE = re.compile(ARCHITECTURE_PATTERN)
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


# Bounds a header must keep before anything is allocated or read for it. A real model file's
# header is well inside them (DeepSeek-V4: 1,900 tensors, ~50 keys, a 20 KiB chat template,
# 129,280 vocab strings); a hostile one declares 2^40 of something to exhaust memory or time.
MAX_KEY_BYTES = 65535
"""A metadata key (the GGUF spec: at most 65535 bytes)."""
MAX_STRING_BYTES = 16 * 1024 * 1024
"""A stored metadata string (chat templates run to tens of KiB)."""
MAX_KV = 1 << 16
"""Metadata keys of one file."""
MAX_TENSORS = 1 << 20
"""Tensors of one file."""
MAX_ARRAY_ELEMENTS = 1 << 26
"""Elements of one metadata array (the largest vocabularies hold ~260,000 tokens)."""
MAX_ARRAY_DEPTH = 2
"""Arrays of arrays (llama.cpp's own files use one level)."""
MAX_DIMS = 4
"""A tensor's dimensions (ggml's GGML_MAX_DIMS)."""
MAX_TENSOR_NAME_BYTES = 4096
MAX_ELEMENTS = 1 << 50
"""Elements of one tensor (a petabyte of F32 weights)."""
MAX_LAYERS = 4096
"""Repeating layers of one model (the largest models have ~200)."""
MAX_ALIGNMENT = 1 << 20
MAX_METADATA_INT = 1 << 32
"""A planning key's integer (context lengths reach ~10^7, vocabularies ~2.6x10^5)."""
MAX_HEADER_BYTES = 64 * 1024 * 1024
"""The whole header, metadata and tensor infos (the largest tokenizers take ~10 MiB)."""


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
    offsets: dict[str, int] = field(default_factory=dict)
    """The byte where each metadata key starts, for messages about its value."""

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


def stream_size(stream: object) -> int | None:
    """The stream's total size where it can tell (a regular file, or a `size` attribute)."""
    size = getattr(stream, "size", None)
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    fileno = getattr(stream, "fileno", None)
    if callable(fileno):
        try:
            info = os.fstat(fileno())
        except (OSError, ValueError):
            return None
        if stat.S_ISREG(info.st_mode):
            position = stream.tell() if callable(getattr(stream, "tell", None)) else 0  # type: ignore[attr-defined]
            return int(info.st_size - position)
    return None


class _Reader:
    """Sequential little- or big-endian reads that count the bytes consumed and check every
    declared count and length against the bytes left and the bounds above before reading."""

    def __init__(self, stream: Readable) -> None:
        self.stream = stream
        self.position = 0
        self.order = "<"
        self.size = stream_size(stream)
        self.where = "the file header"
        """What is being read (a metadata key, a tensor), for messages."""
        self.where_at = 0

    def at(self, where: str) -> None:
        self.where, self.where_at = where, self.position

    def fail(self, problem: str, at: int | None = None) -> GgufError:
        offset = self.position if at is None else at
        return GgufError(f"{self.where} (from byte {self.where_at}): {problem} at byte {offset}")

    def need(self, count: int, each: int, what: str, most: int) -> None:
        """Refuse `count` items of at least `each` bytes that cannot fit or pass `most`."""
        if count > most:
            raise self.fail(f"{what} {count} is more than {most}")
        if self.size is not None and count * each > self.size - self.position:
            raise self.fail(
                f"{what} {count} needs at least {count * each} bytes; "
                f"{max(self.size - self.position, 0)} are left in the file"
            )

    def read(self, n: int) -> bytes:
        if self.position + n > MAX_HEADER_BYTES:
            raise self.fail(f"the header runs past {MAX_HEADER_BYTES} bytes")
        if self.size is not None and n > self.size - self.position:
            raise self.fail(
                f"{n} bytes declared, {max(self.size - self.position, 0)} left in the file"
            )
        data = self.stream.read(n)
        if len(data) != n:
            raise self.fail("unexpected end of file", self.position + len(data))
        self.position += n
        return data

    def skip(self, n: int) -> None:
        if self.size is not None and n > self.size - self.position:
            raise self.fail(
                f"{n} bytes declared, {max(self.size - self.position, 0)} left in the file"
            )
        while n > 0:
            chunk = min(n, _SKIP_CHUNK)
            self.read(chunk)
            n -= chunk

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(self.order + fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self, most: int = MAX_STRING_BYTES, what: str = "string length") -> str:
        length: int = self.unpack("Q")
        self.need(length, 1, what, most)
        return self.read(length).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        length: int = self.unpack("Q")
        self.need(length, 1, "string length", MAX_STRING_BYTES)
        self.skip(length)

    def value(self, vtype: int) -> Scalar:
        if vtype == _STRING:
            return self.string()
        if vtype not in _SCALARS:
            raise self.fail(f"unknown metadata value type {vtype}")
        value: Scalar = self.unpack(_SCALARS[vtype])
        return value

    def array(self, depth: int = 1) -> tuple[list[Any] | None, int]:
        """An array: its values if short (else None), and its element count."""
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(f"arrays nested more than {MAX_ARRAY_DEPTH} deep")
        etype: int = self.unpack("I")
        count: int = self.unpack("Q")
        if etype == _ARRAY:
            least = 12  # an element type and a count
        elif etype == _STRING:
            least = 8  # a length
        elif etype in _SCALARS:
            least = struct.calcsize(_SCALARS[etype])
        else:
            raise self.fail(f"unknown array element type {etype}")
        self.need(count, least, "array length", MAX_ARRAY_ELEMENTS)
        if count < MAX_STORED_ARRAY:
            if etype == _ARRAY:
                return [self.array(depth + 1)[0] for _ in range(count)], count
            return [self.value(etype) for _ in range(count)], count
        if etype == _STRING:
            for _ in range(count):
                self.skip_string()
        elif etype == _ARRAY:
            for _ in range(count):
                self.array(depth + 1)
        else:
            self.skip(count * least)
        return None, count


def read_gguf_header(stream: BinaryIO | Readable) -> GgufHeader:
    """Parse a GGUF header from the stream's current position, reading no tensor data.

    Every count and length the header declares is checked against the bytes left in the stream
    (where its size is known) and against the bounds above before it is read: a malformed or
    hostile header is a GgufError naming the key or tensor and the byte offset, never a large
    allocation."""
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
    # A key-value pair is at least a key length, a one-byte key, a type and a one-byte value.
    reader.need(kv_count, 14, "metadata key count", MAX_KV)
    # A tensor info is at least a name length and name, one dimension, a type and an offset.
    reader.need(tensor_count, 29, "tensor count", MAX_TENSORS)
    metadata: dict[str, MetadataValue] = {}
    array_lengths: dict[str, int] = {}
    offsets: dict[str, int] = {}
    for index in range(kv_count):
        reader.at(f"metadata key #{index}")
        key = reader.string(MAX_KEY_BYTES, "key length")
        offsets.setdefault(key, reader.where_at)
        reader.at(f"metadata key {shorten_name(key)!r}")
        vtype: int = reader.unpack("I")
        if vtype == _ARRAY:
            values, count = reader.array()
            array_lengths[key] = count
            if values is not None:
                metadata[key] = values
        else:
            metadata[key] = reader.value(vtype)
    tensors = []
    for index in range(tensor_count):
        reader.at(f"tensor #{index}")
        name = reader.string(MAX_TENSOR_NAME_BYTES, "tensor name length")
        reader.at(f"tensor {shorten_name(name)!r}")
        layer = _LAYER.match(name)
        if layer and int(layer[1]) >= MAX_LAYERS:
            raise reader.fail(f"layer index {layer[1]} is past {MAX_LAYERS - 1}")
        n_dims: int = reader.unpack("I")
        if not 1 <= n_dims <= MAX_DIMS:
            raise reader.fail(f"{n_dims} dimensions (1 to {MAX_DIMS})")
        dims = tuple(int(reader.unpack("Q")) for _ in range(n_dims))
        if math.prod(dims) > MAX_ELEMENTS:
            raise reader.fail(f"shape {'x'.join(map(str, dims))} has more than 2^50 elements")
        ggml_type: int = reader.unpack("I")
        if ggml_type not in GGML_TYPES:
            raise reader.fail(f"unknown ggml type {ggml_type}")
        if dims[0] % GGML_TYPES[ggml_type][1]:
            raise reader.fail(
                f"a row of {dims[0]} elements is not a multiple of "
                f"{GGML_TYPES[ggml_type][0]}'s block size {GGML_TYPES[ggml_type][1]}"
            )
        offset: int = reader.unpack("Q")
        tensors.append(TensorInfo(name=name, dims=dims, ggml_type=ggml_type, offset=offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(alignment, int)
        or isinstance(alignment, bool)
        or not 0 < alignment <= MAX_ALIGNMENT
    ):
        raise GgufError(
            f"metadata key 'general.alignment' (from byte {offsets['general.alignment']}): "
            f"{shorten_name(repr(alignment))} is not an integer from 1 to {MAX_ALIGNMENT}"
        )
    data_offset = -(-reader.position // alignment) * alignment
    return GgufHeader(
        version=version,
        tensor_count=tensor_count,
        metadata=metadata,
        tensors=tuple(tensors),
        alignment=alignment,
        data_offset=data_offset,
        array_lengths=array_lengths,
        offsets=offsets,
    )


def shorten_name(text: str, limit: int = 80) -> str:
    """A key or tensor name from a file, cut to what a message can carry."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


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


def check_layers(header: GgufHeader) -> int | None:
    """The header's `{arch}.block_count` where it is an integer (None where it has none),
    refused outside 1..MAX_LAYERS: a summary holds one entry per layer."""
    arch = header.architecture
    if arch is None:
        return None
    key = f"{arch}.block_count"
    block_count = header.metadata.get(key)
    if not isinstance(block_count, int) or isinstance(block_count, bool):
        return None
    if not 0 < block_count <= MAX_LAYERS:
        raise GgufError(
            f"metadata key {shorten_name(key)!r} (from byte {header.offsets.get(key, '?')}): "
            f"{block_count} layers (1 to {MAX_LAYERS})"
        )
    return block_count


def summarize(headers: Sequence[GgufHeader]) -> dict[str, Any]:
    """The JSON-able planning summary of a (split) model (schema in the module docstring)."""
    if not headers:
        raise GgufError("no GGUF headers to summarize")
    first = next((h for h in headers if h.architecture), headers[0])
    arch = first.architecture
    if arch is None:
        raise GgufError("no shard has general.architecture")
    if not _ARCHITECTURE.fullmatch(arch):
        raise GgufError(
            f"metadata key 'general.architecture' (from byte "
            f"{first.offsets.get('general.architecture', '?')}): {shorten_name(repr(arch))} is not "
            "an architecture name (lower-case letters, digits, '_' and '-', at most 64)"
        )
    unknown = unknown_architecture(arch)
    if unknown is not None:
        raise GgufError(
            f"metadata key 'general.architecture' (from byte "
            f"{first.offsets.get('general.architecture', '?')}): {arch!r} {unknown}"
        )
    metadata: Mapping[str, MetadataValue] = first.metadata
    subset = {k: _jsonable(v) for k, v in sorted(metadata.items()) if _planning_key(k, arch)}
    for key, value in subset.items():
        values = value if isinstance(value, list) else [value]
        wild = next(
            (v for v in values if isinstance(v, int) and not isinstance(v, bool)
             and abs(v) > MAX_METADATA_INT),
            None,
        )  # fmt: skip
        if wild is not None:
            raise GgufError(
                f"metadata key {shorten_name(key)!r} (from byte {first.offsets.get(key, '?')}): "
                f"{wild} is past what any model has (at most {MAX_METADATA_INT})"
            )
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
                if index >= MAX_LAYERS:
                    raise GgufError(
                        f"tensor {shorten_name(tensor.name)!r}: layer {index} is past the "
                        f"largest layer index this reader takes ({MAX_LAYERS - 1})"
                    )
                layer_bytes[index] = layer_bytes.get(index, 0) + tensor.nbytes
            else:
                other[tensor.name] = other.get(tensor.name, 0) + tensor.nbytes
            # Matrix weights (2-D, or 3-D experts); the input layer's lookup table is none.
            if len(tensor.dims) in (2, 3) and not tensor.name.startswith(INPUT_TENSORS):
                where = matmul.setdefault(match[1] if match else "output", {})
                key = tensor_key(tensor.type_name, tensor.dims)
                where[key] = where.get(key, 0) + 1
    block_count = check_layers(first)
    n_layers = max([*layer_bytes, -1]) + 1
    if block_count is not None:
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
