"""A deterministic, loadable, very small llama-architecture model as a split GGUF set.

The weights are random noise: the model is only good for exercising the loading and
serving path of llama-server (split discovery, tokenizer, chat template, KV cache
types), not for producing meaningful text.
"""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

from components.gguf_header import read_gguf_header, summarize

ARCH = "llama"
SEED = 20240731

N_LAYER = 2
N_EMBD = 64
N_HEAD = 2
N_HEAD_KV = 2
# Quantized KV caches (q8_0/q4_0) are stored in 32-element blocks, so the head size
# must be a multiple of 32.
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 128
# Larger than any context the contract tests ask for, so llama.cpp does not warn
# about exceeding the training context.
CONTEXT_LENGTH = 131072
RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class _Vocab:
    tokens: list[str]
    scores: list[float]
    types: list[int]


@dataclass(frozen=True)
class TinyLlamaSpec:
    """Shape and weight type of a generated llama model (defaults: the module's constants)."""

    n_layer: int = N_LAYER
    n_embd: int = N_EMBD
    n_head: int = N_HEAD
    n_head_kv: int = N_HEAD_KV
    n_ff: int = N_FF
    weight_type: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32
    """Type of the 2-D weights (F32, F16, Q8_0 or Q4_0); norms stay F32."""

    @property
    def head_dim(self) -> int:
        """Per-head size (embedding / heads)."""
        return self.n_embd // self.n_head


DEFAULT_SPEC = TinyLlamaSpec()
LLAMA43_SPEC = TinyLlamaSpec(
    n_layer=43, n_embd=1024, n_head=8, n_head_kv=8, n_ff=1024,
    weight_type=gguf.GGMLQuantizationType.F16,
)  # fmt: skip
"""43 layers (44 offloadable: `-ngl 40` leaves 4 on the CPU, as on the NUCBox), ~600 MiB: the
`llama43` model of the real Vulkan load logs under tests/fixtures/gpu_gate/."""


def _spm_vocab() -> _Vocab:
    """SentencePiece-style vocab: specials, all 256 byte-fallback tokens, ASCII pieces.

    The byte tokens make every input tokenizable (and llama.cpp looks up ``<0x0A>``
    as the newline token when loading an SPM vocab).
    """
    tokens = [UNK, BOS, EOS]
    types = [
        int(gguf.TokenType.UNKNOWN),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
    ]
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        types.append(int(gguf.TokenType.BYTE))
    pieces = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    for piece in pieces:
        tokens.append(piece)
        types.append(int(gguf.TokenType.NORMAL))
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(i) for i in range(len(pieces))]
    return _Vocab(tokens=tokens, scores=scores, types=types)


def _block_tensor_name(kind: gguf.MODEL_TENSOR, bid: int) -> str:
    return gguf.TENSOR_NAMES[kind].format(bid=bid) + ".weight"


def _tensors(
    n_vocab: int, spec: TinyLlamaSpec = DEFAULT_SPEC, seed: int = SEED
) -> list[tuple[str, npt.NDArray[np.float32]]]:
    """Weights in llama.cpp's tensor naming; numpy shapes are GGUF ``ne`` reversed."""
    rng = np.random.default_rng(seed)
    embd, head_dim = spec.n_embd, spec.head_dim

    def dense(rows: int, cols: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    def ones(n: int) -> npt.NDArray[np.float32]:
        return np.ones(n, dtype=np.float32)

    names = gguf.TENSOR_NAMES
    t = gguf.MODEL_TENSOR
    out: list[tuple[str, npt.NDArray[np.float32]]] = [
        (names[t.TOKEN_EMBD] + ".weight", dense(n_vocab, embd)),
    ]
    for bid in range(spec.n_layer):
        out += [
            (_block_tensor_name(t.ATTN_NORM, bid), ones(embd)),
            (_block_tensor_name(t.ATTN_Q, bid), dense(spec.n_head * head_dim, embd)),
            (_block_tensor_name(t.ATTN_K, bid), dense(spec.n_head_kv * head_dim, embd)),
            (_block_tensor_name(t.ATTN_V, bid), dense(spec.n_head_kv * head_dim, embd)),
            (_block_tensor_name(t.ATTN_OUT, bid), dense(embd, spec.n_head * head_dim)),
            (_block_tensor_name(t.FFN_NORM, bid), ones(embd)),
            (_block_tensor_name(t.FFN_GATE, bid), dense(spec.n_ff, embd)),
            (_block_tensor_name(t.FFN_UP, bid), dense(spec.n_ff, embd)),
            (_block_tensor_name(t.FFN_DOWN, bid), dense(embd, spec.n_ff)),
        ]
    out += [
        (names[t.OUTPUT_NORM] + ".weight", ones(embd)),
        (names[t.OUTPUT] + ".weight", dense(n_vocab, embd)),
    ]
    return out


_FILE_TYPES = {
    gguf.GGMLQuantizationType.F32: gguf.LlamaFileType.ALL_F32,
    gguf.GGMLQuantizationType.F16: gguf.LlamaFileType.MOSTLY_F16,
    gguf.GGMLQuantizationType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
    gguf.GGMLQuantizationType.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0,
}


def _add_sizes(
    writer: gguf.GGUFWriter, spec: TinyLlamaSpec | TinyQwen3MoeSpec, context_length: int, n_ff: int
) -> None:
    """The sizes llama.cpp reads of either architecture: context, embedding, layers, FFN, heads."""
    writer.add_context_length(context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)


def _add_model_metadata(
    writer: gguf.GGUFWriter, vocab: _Vocab, spec: TinyLlamaSpec = DEFAULT_SPEC
) -> None:
    writer.add_name("tiny-llama-contract-test")
    writer.add_file_type(int(_FILE_TYPES[spec.weight_type]))
    _add_sizes(writer, spec, CONTEXT_LENGTH, spec.n_ff)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_vocab_size(len(vocab.tokens))
    _add_tokenizer(writer, vocab)


def _add_tokenizer(writer: gguf.GGUFWriter, vocab: _Vocab) -> None:
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_unk_token_id(vocab.tokens.index(UNK))
    writer.add_bos_token_id(vocab.tokens.index(BOS))
    writer.add_eos_token_id(vocab.tokens.index(EOS))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


def shard_names(prefix: str, shards: int) -> list[str]:
    """File names llama.cpp derives from the first shard (``llama_split_path``)."""
    return [f"{prefix}-{i:05d}-of-{shards:05d}.gguf" for i in range(1, shards + 1)]


def write_tiny_split_model(
    directory: pathlib.Path, prefix: str, shards: int = 3
) -> list[pathlib.Path]:
    """Write the model as ``{prefix}-0000i-of-0000N.gguf`` and return the paths in order.

    The full metadata lives in the first shard (llama.cpp reads hyperparameters and
    the tokenizer from it only); every shard carries the ``split.*`` keys and a
    contiguous slice of the tensors.
    """
    return write_tiny_model(directory, prefix, shards, DEFAULT_SPEC)


def _typed(
    data: npt.NDArray[np.float32], weight_type: gguf.GGMLQuantizationType
) -> tuple[npt.NDArray[np.generic], gguf.GGMLQuantizationType | None]:
    if data.ndim < 2 or weight_type == gguf.GGMLQuantizationType.F32:
        return data, None
    if weight_type == gguf.GGMLQuantizationType.F16:
        return data.astype(np.float16), None
    return gguf.quants.quantize(data, weight_type), weight_type


def write_tiny_model(
    directory: pathlib.Path, prefix: str, shards: int, spec: TinyLlamaSpec
) -> list[pathlib.Path]:
    """Like ``write_tiny_split_model``, for a model of the given shape and weight type."""
    return write_tiny_model_seeded(directory, prefix, shards, spec, seed=SEED)


def write_tiny_model_seeded(
    directory: pathlib.Path,
    prefix: str,
    shards: int = 3,
    spec: TinyLlamaSpec = DEFAULT_SPEC,
    *,
    seed: int = SEED,
    keep_layers: int | None = None,
) -> list[pathlib.Path]:
    """Like ``write_tiny_model``, with weights drawn from ``seed`` (other seed: other model).

    ``keep_layers``: only the first that many blocks of that model, with its embeddings, output
    norm and output (a draft of it for speculative decoding: same vocab, same first layers)."""
    vocab = _spm_vocab()
    tensors = _tensors(len(vocab.tokens), spec, seed)
    if keep_layers is not None:
        if not 1 <= keep_layers <= spec.n_layer:
            raise ValueError(f"keep_layers must be between 1 and {spec.n_layer}, got {keep_layers}")
        tensors = [
            (name, data)
            for name, data in tensors
            if not name.startswith("blk.") or int(name.split(".")[1]) < keep_layers
        ]
        spec = dataclasses.replace(spec, n_layer=keep_layers)
    if not 1 <= shards <= len(tensors):
        raise ValueError(f"shards must be between 1 and {len(tensors)}, got {shards}")

    directory.mkdir(parents=True, exist_ok=True)
    bounds = [i * len(tensors) // shards for i in range(shards + 1)]
    paths = [directory / n for n in shard_names(prefix, shards)]
    for index, path in enumerate(paths):
        writer = gguf.GGUFWriter(path, ARCH)
        try:
            if index == 0:
                _add_model_metadata(writer, vocab, spec)
            # llama.cpp reads split.no with gguf_get_val_u16, so the types matter.
            writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_NO, index)
            writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_COUNT, shards)
            writer.add_int32(gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, len(tensors))
            for name, data in tensors[bounds[index] : bounds[index + 1]]:
                typed, raw_dtype = _typed(data, spec.weight_type)
                writer.add_tensor(name, typed, raw_dtype=raw_dtype)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    return paths


@dataclass(frozen=True)
class TinyQwen3MoeSpec:
    """A tiny qwen3moe model: grouped-query attention (fewer KV heads than query heads) and a
    mixture of experts, as Qwen3-30B-A3B has them at a fraction of the size."""

    n_layer: int = 3
    n_embd: int = 256
    n_head: int = 8
    n_head_kv: int = 2
    head_dim: int = 32
    """Quantized KV caches need head sizes divisible by 32."""
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_expert: int = 128
    context_length: int = 8192
    """Its trained context (`qwen3moe.context_length`): what a slot may hold."""


def write_tiny_qwen3moe(
    directory: pathlib.Path,
    name: str,
    spec: TinyQwen3MoeSpec = TinyQwen3MoeSpec(),
    seed: int = SEED,
) -> pathlib.Path:
    """Write ``{name}.gguf``: a loadable qwen3moe model (F16 matrices, F32 norms and router)
    with the SentencePiece test vocabulary, tensors as llama.cpp's qwen3moe loader reads them."""
    rng = np.random.default_rng(seed)
    vocab = _spm_vocab()
    s, n_vocab = spec, len(vocab.tokens)
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim

    def dense(*shape: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> npt.NDArray[np.float32]:
        return np.ones(n, dtype=np.float32)

    # numpy shapes are GGUF `ne` reversed: ne [n_embd, n_ff, n_expert] is (n_expert, n_ff, n_embd).
    tensors: list[tuple[str, npt.NDArray[np.float32]]] = [
        ("token_embd.weight", dense(n_vocab, s.n_embd))
    ]
    for i in range(s.n_layer):
        tensors += [
            (f"blk.{i}.attn_norm.weight", ones(s.n_embd)),
            (f"blk.{i}.attn_q.weight", dense(q, s.n_embd)),
            (f"blk.{i}.attn_k.weight", dense(kv, s.n_embd)),
            (f"blk.{i}.attn_v.weight", dense(kv, s.n_embd)),
            (f"blk.{i}.attn_output.weight", dense(s.n_embd, q)),
            (f"blk.{i}.attn_q_norm.weight", ones(s.head_dim)),
            (f"blk.{i}.attn_k_norm.weight", ones(s.head_dim)),
            (f"blk.{i}.ffn_norm.weight", ones(s.n_embd)),
            (f"blk.{i}.ffn_gate_inp.weight", dense(s.n_expert, s.n_embd)),
            (f"blk.{i}.ffn_gate_exps.weight", dense(s.n_expert, s.n_ff_expert, s.n_embd)),
            (f"blk.{i}.ffn_up_exps.weight", dense(s.n_expert, s.n_ff_expert, s.n_embd)),
            (f"blk.{i}.ffn_down_exps.weight", dense(s.n_expert, s.n_embd, s.n_ff_expert)),
        ]
    tensors += [("output_norm.weight", ones(s.n_embd)), ("output.weight", dense(n_vocab, s.n_embd))]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.gguf"
    writer = gguf.GGUFWriter(path, "qwen3moe")
    try:
        writer.add_name("tiny-qwen3moe-contract-test")
        writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
        _add_sizes(writer, s, s.context_length, s.n_ff_expert * s.n_expert_used)
        writer.add_key_length(s.head_dim)
        writer.add_value_length(s.head_dim)
        writer.add_rope_freq_base(ROPE_FREQ_BASE)
        writer.add_layer_norm_rms_eps(RMS_EPS)
        writer.add_expert_count(s.n_expert)
        writer.add_expert_used_count(s.n_expert_used)
        writer.add_expert_feed_forward_length(s.n_ff_expert)
        _add_tokenizer(writer, vocab)
        for name_, data in tensors:
            # The router stays F32, as in the converted models; matrices are F16.
            typed = data if data.ndim < 2 or "ffn_gate_inp" in name_ else data.astype(np.float16)
            writer.add_tensor(name_, typed)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return path


@dataclass(frozen=True)
class TinyArchSpec:
    """A tiny model of another architecture llama.cpp b11434 loads (`write_tiny_arch`):
    grouped-query attention of 32-wide heads, F16 matrices, F32 norms, biases and routers."""

    arch: str
    n_layer: int = 4
    """Repeating layers, NextN/MTP layers included (`block_count`)."""
    n_embd: int = 256
    n_head: int = 8
    n_head_kv: int = 2
    head_dim: int = 32
    n_ff: int = 512
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_expert: int = 128
    sliding_window: int = 0
    """`attention.sliding_window` (0: not written)."""
    nextn: int = 0
    """`nextn_predict_layers`: the last that many blocks are NextN/MTP layers (glm4moe)."""
    context_length: int = 65536
    tied_output: bool = False
    """No `output.weight`: the output reuses `token_embd` (gemma's tied embeddings)."""


TINY_GPT_OSS = TinyArchSpec("gpt-oss", sliding_window=128)
TINY_GLM4MOE = TinyArchSpec("glm4moe", nextn=1)
TINY_GEMMA2 = TinyArchSpec("gemma2", sliding_window=256, tied_output=True)
TINY_GEMMA3 = TinyArchSpec("gemma3", n_layer=7, sliding_window=256)
"""Seven layers: gemma3's pattern (every 6th layer full) gives 0-4 and 6 the window, 5 not."""


def _arch_tensors(
    s: TinyArchSpec, n_vocab: int, rng: np.random.Generator
) -> list[tuple[str, npt.NDArray[np.float32]]]:
    """The tensors llama.cpp's loader of `s.arch` creates (src/models/*.cpp load_arch_tensors);
    numpy shapes are GGUF `ne` reversed."""

    def dense(*shape: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(*shape: int) -> npt.NDArray[np.float32]:
        return np.ones(shape, dtype=np.float32)

    q, kv, e = s.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.n_embd
    out = [("token_embd.weight", dense(n_vocab, e))]
    for i in range(s.n_layer):
        b = f"blk.{i}"
        out += [
            (f"{b}.attn_norm.weight", ones(e)),
            (f"{b}.attn_q.weight", dense(q, e)),
            (f"{b}.attn_k.weight", dense(kv, e)),
            (f"{b}.attn_v.weight", dense(kv, e)),
            (f"{b}.attn_output.weight", dense(e, q)),
            (f"{b}.post_attention_norm.weight", ones(e)),
        ]
        experts = [
            (f"{b}.ffn_gate_inp.weight", dense(s.n_expert, e)),
            (f"{b}.ffn_gate_exps.weight", dense(s.n_expert, s.n_ff_expert, e)),
            (f"{b}.ffn_up_exps.weight", dense(s.n_expert, s.n_ff_expert, e)),
            (f"{b}.ffn_down_exps.weight", dense(s.n_expert, e, s.n_ff_expert)),
        ]
        if s.arch == "gpt-oss":
            out += [
                *experts,
                (f"{b}.attn_q.bias", dense(q)),
                (f"{b}.attn_k.bias", dense(kv)),
                (f"{b}.attn_v.bias", dense(kv)),
                (f"{b}.attn_output.bias", dense(e)),
                (f"{b}.attn_sinks.weight", dense(s.n_head)),
                (f"{b}.ffn_gate_inp.bias", dense(s.n_expert)),
                (f"{b}.ffn_gate_exps.bias", dense(s.n_expert, s.n_ff_expert)),
                (f"{b}.ffn_up_exps.bias", dense(s.n_expert, s.n_ff_expert)),
                (f"{b}.ffn_down_exps.bias", dense(s.n_expert, e)),
            ]
        elif s.arch == "glm4moe":
            out += [
                (f"{b}.attn_q.bias", dense(q)),
                (f"{b}.attn_k.bias", dense(kv)),
                (f"{b}.attn_v.bias", dense(kv)),
            ]
            if i == 0:  # leading_dense_block_count 1
                out += [
                    (f"{b}.ffn_gate.weight", dense(s.n_ff, e)),
                    (f"{b}.ffn_up.weight", dense(s.n_ff, e)),
                    (f"{b}.ffn_down.weight", dense(e, s.n_ff)),
                ]
            else:
                out += [
                    *experts,
                    (f"{b}.exp_probs_b.bias", dense(s.n_expert)),
                    (f"{b}.ffn_gate_shexp.weight", dense(s.n_ff_expert, e)),
                    (f"{b}.ffn_up_shexp.weight", dense(s.n_ff_expert, e)),
                    (f"{b}.ffn_down_shexp.weight", dense(e, s.n_ff_expert)),
                ]
            if i >= s.n_layer - s.nextn:
                out += [
                    (f"{b}.nextn.eh_proj.weight", dense(e, 2 * e)),
                    (f"{b}.nextn.enorm.weight", ones(e)),
                    (f"{b}.nextn.hnorm.weight", ones(e)),
                    (f"{b}.nextn.shared_head_norm.weight", ones(e)),
                ]
        elif s.arch in ("gemma2", "gemma3"):
            out += [(f"{b}.attn_q_norm.weight", ones(s.head_dim))] if s.arch == "gemma3" else []
            out += [(f"{b}.attn_k_norm.weight", ones(s.head_dim))] if s.arch == "gemma3" else []
            out += [
                (f"{b}.ffn_norm.weight", ones(e)),
                (f"{b}.ffn_gate.weight", dense(s.n_ff, e)),
                (f"{b}.ffn_up.weight", dense(s.n_ff, e)),
                (f"{b}.ffn_down.weight", dense(e, s.n_ff)),
                (f"{b}.post_ffw_norm.weight", ones(e)),
            ]
        else:
            raise ValueError(f"no tiny {s.arch} model")
    out.append(("output_norm.weight", ones(e)))
    if not s.tied_output:
        out.append(("output.weight", dense(n_vocab, e)))
    return out


def write_tiny_arch(
    directory: pathlib.Path, name: str, spec: TinyArchSpec, seed: int = SEED
) -> pathlib.Path:
    """Write ``{name}.gguf``: a loadable tiny model of `spec.arch` (gpt-oss, glm4moe, gemma2,
    gemma3)
    with the SentencePiece test vocabulary."""
    rng = np.random.default_rng(seed)
    vocab = _spm_vocab()
    s, a = spec, spec.arch
    tensors = _arch_tensors(s, len(vocab.tokens), rng)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.gguf"
    writer = gguf.GGUFWriter(path, a)
    try:
        writer.add_name(f"tiny-{a}-contract-test")
        writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
        writer.add_context_length(s.context_length)
        writer.add_embedding_length(s.n_embd)
        writer.add_block_count(s.n_layer)
        writer.add_feed_forward_length(s.n_ff)
        writer.add_head_count(s.n_head)
        writer.add_head_count_kv(s.n_head_kv)
        writer.add_key_length(s.head_dim)
        writer.add_value_length(s.head_dim)
        writer.add_rope_dimension_count(s.head_dim)
        writer.add_rope_freq_base(ROPE_FREQ_BASE)
        writer.add_layer_norm_rms_eps(RMS_EPS)
        if a in ("gpt-oss", "glm4moe"):
            writer.add_expert_count(s.n_expert)
            writer.add_expert_used_count(s.n_expert_used)
            writer.add_expert_feed_forward_length(s.n_ff_expert)
        if a == "glm4moe":
            writer.add_expert_shared_count(1)
            writer.add_leading_dense_block_count(1)
            writer.add_nextn_predict_layers(s.nextn)
        if s.sliding_window:
            writer.add_sliding_window(s.sliding_window)
        _add_tokenizer(writer, vocab)
        for name_, data in tensors:
            # Matrices F16; norms, biases, sinks and routers F32, as in the converted models.
            keep = data.ndim < 2 or "ffn_gate_inp" in name_ or name_.endswith(".bias")
            writer.add_tensor(name_, data if keep else data.astype(np.float16))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return path


def header_summary(paths: list[pathlib.Path]) -> dict[str, Any]:
    """The lock's header summary of GGUF files on disk, as `llm-infra lock` records it."""
    headers = []
    for path in paths:
        with path.open("rb") as stream:
            headers.append(read_gguf_header(stream))
    return summarize(headers)
