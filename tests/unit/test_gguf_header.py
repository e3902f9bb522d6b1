"""The standard-library GGUF header reader agrees with gguf's reader and reads only the header."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from components.gguf_header import (
    GGML_TYPES,
    MAX_STORED_ARRAY,
    GgufError,
    GgufHeader,
    read_gguf_header,
    summarize,
    tensor_key_bytes,
)
from tests.support.tiny_gguf import write_tiny_split_model

Q = gguf.GGMLQuantizationType


class CountingStream:
    """A read-only stream that counts the bytes handed out."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)
        self.bytes_read = 0

    def read(self, n: int = -1, /) -> bytes:
        chunk = self._inner.read(n)
        self.bytes_read += len(chunk)
        return chunk


def write_sample(
    path: Path, endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE, alignment: int | None = None
) -> Path:
    """A file with every metadata value type, short and long arrays, and typed tensors."""
    writer = gguf.GGUFWriter(path, "llama", endianess=endianess)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -100)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -30000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -2_000_000_000)
    writer.add_float32("t.f32", 1.5)
    writer.add_uint64("t.u64", 2**60)
    writer.add_int64("t.i64", -(2**60))
    writer.add_float64("t.f64", math.pi)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo")
    writer.add_array("t.ints", [0, 0, 4, 128])
    writer.add_array("t.strs", ["a", "bc"])
    writer.add_array("t.big_ints", list(range(1000)))
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(5000)])
    writer.add_block_count(1)
    rng = np.random.default_rng(1)
    writer.add_tensor("token_embd.weight", rng.standard_normal((64, 32)).astype(np.float32))
    writer.add_tensor("blk.0.attn_q.weight", rng.standard_normal((32, 32)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((16, 64)).astype(np.float32), Q.Q8_0)
    writer.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    # A large tensor, so that "header only" is far from "the whole file".
    writer.add_tensor("output.weight", np.zeros((1024, 1024), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def read_path(path: Path) -> GgufHeader:
    with path.open("rb") as stream:
        return read_gguf_header(stream)


def reference_metadata(reader: gguf.GGUFReader) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        values[name] = field.contents()
    return values


def test_type_table_equals_gguf_quant_sizes() -> None:
    expected = {int(t): (t.name, b, s) for t, (b, s) in gguf.constants.GGML_QUANT_SIZES.items()}
    assert expected == GGML_TYPES


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_header_matches_gguf_reader(tmp_path: Path, endianess: gguf.GGUFEndian) -> None:
    path = write_sample(tmp_path / "sample.gguf", endianess)
    header = read_path(path)
    reader = gguf.GGUFReader(path)
    reference = reference_metadata(reader)

    assert header.version == 3
    stored = {k: v for k, v in reference.items() if not isinstance(v, list) or len(v) < 64}
    assert set(header.metadata) == set(stored)
    for key, value in stored.items():
        if isinstance(value, float):
            assert header.metadata[key] == pytest.approx(value), key
        else:
            assert header.metadata[key] == value, key
    assert header.tensor_count == len(reader.tensors) == 5
    for mine, theirs in zip(header.tensors, reader.tensors, strict=True):
        assert mine.name == theirs.name
        assert mine.dims == tuple(int(d) for d in theirs.shape)
        assert mine.ggml_type == int(theirs.tensor_type)
        assert mine.n_elements == int(theirs.n_elements)
        assert mine.nbytes == int(theirs.n_bytes)
        assert header.data_offset + mine.offset == int(theirs.data_offset)


def test_long_arrays_are_counted_but_not_stored(tmp_path: Path) -> None:
    header = read_path(write_sample(tmp_path / "sample.gguf"))
    assert "tokenizer.ggml.tokens" not in header.metadata
    assert "t.big_ints" not in header.metadata
    assert header.array_lengths["tokenizer.ggml.tokens"] == 5000
    assert header.array_lengths["t.big_ints"] == 1000
    assert header.metadata["t.ints"] == [0, 0, 4, 128]
    assert header.metadata["t.strs"] == ["a", "bc"]
    assert MAX_STORED_ARRAY == 64


def test_reads_only_the_header(tmp_path: Path) -> None:
    data = write_sample(tmp_path / "sample.gguf").read_bytes()
    stream = CountingStream(data)
    header = read_gguf_header(stream)
    assert stream.bytes_read <= header.data_offset
    assert stream.bytes_read < len(data) // 20
    assert header.data_offset + header.tensor_bytes <= len(data)


def test_custom_alignment_sets_the_data_offset(tmp_path: Path) -> None:
    path = write_sample(tmp_path / "aligned.gguf", alignment=256)
    header = read_path(path)
    reader = gguf.GGUFReader(path)
    assert header.alignment == 256
    assert header.data_offset % 256 == 0
    assert header.data_offset + header.tensors[-1].offset == int(reader.tensors[-1].data_offset)


def test_default_alignment_is_32(tmp_path: Path) -> None:
    assert read_path(write_sample(tmp_path / "sample.gguf")).alignment == 32


def test_rejects_a_file_that_is_not_gguf() -> None:
    with pytest.raises(GgufError, match="bad magic"):
        read_gguf_header(io.BytesIO(b"PK\x03\x04" + bytes(64)))


def test_rejects_a_truncated_header(tmp_path: Path) -> None:
    data = write_sample(tmp_path / "sample.gguf").read_bytes()
    with pytest.raises(GgufError, match="unexpected end of file"):
        read_gguf_header(io.BytesIO(data[:200]))


def test_summary_of_a_three_shard_set(tmp_path: Path) -> None:
    shards = write_tiny_split_model(tmp_path, "tiny", 3)
    headers = [read_path(s) for s in shards]
    summary = summarize(headers)
    tensors = [t for s in shards for t in gguf.GGUFReader(s).tensors]

    assert json.loads(json.dumps(summary)) == summary
    assert summary["schema"] == 3
    assert summary["architecture"] == "llama"
    assert summary["tensor_count"] == len(tensors) == 21
    assert summary["total_bytes"] == sum(int(t.n_bytes) for t in tensors)
    per_layer = [
        sum(int(t.n_bytes) for t in tensors if t.name.startswith(f"blk.{i}.")) for i in (0, 1)
    ]
    assert summary["layer_bytes"] == per_layer
    assert set(summary["other_tensors"]) == {
        "token_embd.weight",
        "output_norm.weight",
        "output.weight",
    }
    metadata = summary["metadata"]
    assert metadata["llama.block_count"] == 2
    assert metadata["llama.attention.head_count_kv"] == 2
    assert metadata["llama.rope.dimension_count"] == 32
    assert metadata["llama.context_length"] == 131072
    assert not any(k.startswith(("tokenizer.", "split.")) for k in metadata)
    assert summary["vocab_size"] == headers[0].array_lengths["tokenizer.ggml.tokens"]
    # Matrix weights by layer, by "TYPE ne0xne1": the 2-D tensors but token_embd's lookup table.
    expected: dict[str, dict[str, int]] = {}
    for t in tensors:
        if len(t.shape) != 2 or t.name.startswith("token_embd."):
            continue
        where = t.name.split(".")[1] if t.name.startswith("blk.") else "output"
        key = f"{t.tensor_type.name} {'x'.join(str(int(d)) for d in t.shape)}"
        expected.setdefault(where, {})[key] = expected.get(where, {}).get(key, 0) + 1
    assert summary["matmul_weights"] == expected
    assert list(summary["matmul_weights"]) == ["0", "1", "output"]
    # Every tensor by name (schema 3), with the bytes gguf itself gives each.
    assert set(summary["tensors"]) == {t.name for t in tensors}
    for t in tensors:
        key = summary["tensors"][t.name]
        assert key == f"{t.tensor_type.name} {'x'.join(str(int(d)) for d in t.shape)}"
        assert tensor_key_bytes(key) == int(t.n_bytes)


def test_summary_keeps_every_deepseek4_key(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(tmp_path / "ds4.gguf", "deepseek4")
    writer.add_block_count(4)
    writer.add_array("deepseek4.attention.compress_ratios", [0, 0, 4, 128])
    writer.add_uint32("deepseek4.attention.sliding_window", 128)
    writer.add_uint32("deepseek4.hash_layer_count", 3)
    writer.add_string("general.name", "not a planning key")
    writer.add_tensor("blk.3.attn_q.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    summary = summarize([read_path(tmp_path / "ds4.gguf")])
    assert summary["metadata"]["deepseek4.attention.compress_ratios"] == [0, 0, 4, 128]
    assert summary["metadata"]["deepseek4.hash_layer_count"] == 3
    assert "general.name" not in summary["metadata"]
    assert summary["layer_bytes"] == [0, 0, 0, 8 * 32 * 4]


def test_a_summary_holds_json_where_the_header_has_infinities(tmp_path: Path) -> None:
    # llama.cpp's own tiny deepseek4 has `kda.gate_lower_bound = -inf`: a lock file can only
    # hold null there, and the summary must be what the lock file holds.
    writer = gguf.GGUFWriter(tmp_path / "ds4.gguf", "deepseek4")
    writer.add_block_count(1)
    writer.add_float32("deepseek4.kda.gate_lower_bound", -math.inf)
    writer.add_float32("deepseek4.attention.scale", math.nan)
    writer.add_float32("deepseek4.rope.freq_base", 10000.0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    summary = summarize([read_path(tmp_path / "ds4.gguf")])
    metadata = summary["metadata"]
    assert metadata["deepseek4.kda.gate_lower_bound"] is None
    assert metadata["deepseek4.attention.scale"] is None
    assert metadata["deepseek4.rope.freq_base"] == 10000.0
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary


def test_a_header_of_an_architecture_llama_cpp_does_not_load_is_refused_with_the_nearest(
    tmp_path: Path,
) -> None:
    writer = gguf.GGUFWriter(tmp_path / "oss.gguf", "gpt_oss")
    writer.add_block_count(1)
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GgufError) as refused:
        summarize([read_path(tmp_path / "oss.gguf")])
    message = str(refused.value)
    assert message.startswith("metadata key 'general.architecture' (from byte ")
    assert (
        "'gpt_oss' is not an architecture llama.cpp b11434 loads (the nearest: gpt-oss" in message
    )
