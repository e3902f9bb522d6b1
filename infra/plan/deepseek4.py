"""Attention shapes and the KV cache layouts llama-server b11434 allocates for them.

The cache layout: `-c` is padded to 256; with an explicit `-np N` the cache is per sequence
(`kv_unified` off): N streams of `pad256(c / N)` cells. With `kv_unified` one stream of `c`
cells, except that the deepseek4 cache always keeps one stream per sequence, each sized for the
full context.

KV cache sizes follow llama.cpp's cache constructors (`llama-kv-cache*.cpp`):

- standard: sum over layers of cells x (row(n_head_kv x head_k, type_k) + row(n_head_kv x
  head_v, type_v));
- sliding-window layers (gpt-oss, gemma2, gemma3: `SLIDING_WINDOW_MODELS`) hold
  pad256(min(cells, `attention.sliding_window` x (N with `kv_unified`, else 1) + ubatch)) cells per
  stream (`llama_kv_cache_iswa`), the other layers the full `cells`; `--swa-full` gives every
  layer the full size;
- MLA (deepseek2/3, `attention.kv_lora_rank`): K only, row(kv_lora_rank + rope dims);
- deepseek4 (K only, head `attention.key_length`), per stream with context C and ubatch u:
  every layer keeps a raw sliding window of pad256(min(C, `attention.sliding_window` + u))
  cells; layers whose `attention.compress_ratios` entry is 4 add pad256(ceil(C/4)) compressed
  cells plus an indexer cache of the same length with rows of `attention.indexer.key_length`;
  ratio-128 layers add pad256(ceil(C/128)) cells; and F32 compressor state per stream
  (2 x 2·head x 8 per ratio-4 layer, 2 x head x 128 per ratio-128 layer, 2 x 2·indexer x 8 per
  ratio-4 layer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from components.gguf_header import row_bytes
from components.llamacpp.expected_props import slot_cells

KV_PAD = 256
DEFAULT_UBATCH = 512
DEFAULT_BATCH = 2048
# llama.cpp's deepseek4 cache: compressed-sparse (CSA) and heavily-compressed (HCA) layers.
DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128

AttentionKind = Literal["standard", "mla", "deepseek4"]


def pad(value: int, multiple: int = KV_PAD) -> int:
    """`value` rounded up to a multiple (GGML_PAD)."""
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class AttentionShape:
    """The KV-relevant structure of a model's attention."""

    kind: AttentionKind
    n_layer: int
    """Layers with a KV cache (block_count minus MTP/nextn layers)."""
    n_head_kv: tuple[int, ...]
    """KV heads per layer."""
    head_k: int
    head_v: int
    kv_lora_rank: int = 0
    """MLA: compressed KV width (K-only rows of kv_lora_rank + rope_dim)."""
    rope_dim: int = 0
    sliding_window: int = 0
    """deepseek4: raw window of every layer; standard: the window of the `swa_layers`
    (`attention.sliding_window`)."""
    swa_layers: tuple[bool, ...] = ()
    """standard: which layers attend through the sliding window (empty: none)."""
    architecture: str = ""
    """`general.architecture` (what the plan's architecture lines name)."""
    compress_ratios: tuple[int, ...] = ()
    """deepseek4: per-layer compression ratio (0, 4 or 128)."""
    indexer_head: int = 0
    """deepseek4: lightning-indexer row width (`attention.indexer.key_length`)."""
    n_head: int = 0
    n_embd: int = 0
    n_ff: int = 0
    n_vocab: int = 0
    n_expert_used: int = 0
    """Experts per token of a mixture of experts (0: dense; `n_ff` is then the experts' width
    times this)."""
    n_ff_dense: int = 0
    """`feed_forward_length` of a mixture of experts' leading dense blocks (0: none)."""
    assumed: tuple[tuple[str, int], ...] = ()
    """Keys the metadata lacks and the shape took a default for, with the value it took
    (`infra.plan.llamacpp` prints each as an assumption with its effect)."""


def _int(metadata: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = metadata.get(key, default)
    if isinstance(value, list):
        value = max(value) if value else default
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"model metadata lacks {key}")
    return int(value)


def _positive(metadata: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = _int(metadata, key, default)
    if value <= 0:
        raise ValueError(f"{key} is {value}; it must be a positive count")
    return value


def _per_layer(
    metadata: Mapping[str, Any], key: str, n_layer: int, default: int
) -> tuple[int, ...]:
    value = metadata.get(key, default)
    if isinstance(value, list):
        if len(value) < n_layer:
            raise ValueError(f"{key} has {len(value)} entries for {n_layer} layers")
        return tuple(int(v) for v in value[:n_layer])
    return (int(value),) * n_layer


@dataclass(frozen=True)
class SlidingWindowModel:
    """How llama.cpp b11434 reads one architecture's sliding window (`load_arch_hparams` in
    src/models/*.cpp, `load_swa_pattern` and `llama_hparams::set_swa_pattern`)."""

    pattern: int
    """Every `pattern`-th layer attends to the full context, the others to the window (unless
    `attention.sliding_window_pattern` gives an int of its own, or one flag per layer)."""
    default_window: int | None
    """The window without `attention.sliding_window`; None: the key is required (gpt-oss)."""
    needs_key: bool = False
    """gemma3: no `attention.sliding_window` (or 0) means no sliding window at all."""


SLIDING_WINDOW_MODELS = {
    "gpt-oss": SlidingWindowModel(pattern=2, default_window=None),
    "gemma2": SlidingWindowModel(pattern=2, default_window=4096),
    "gemma3": SlidingWindowModel(pattern=6, default_window=0, needs_key=True),
}
"""The sliding-window architectures the plan sizes as llama.cpp does; for the others
llama.cpp gives a window-sized cache to (`components.llama_archs`), the plan budgets the full
context on every layer and says so."""


def sliding_window(
    architecture: str, metadata: Mapping[str, Any], n_layer: int
) -> tuple[int, tuple[bool, ...]]:
    """The window and which of the `n_layer` layers use it, as llama.cpp b11434 reads them
    (`(0, ())` for an architecture without one, or one the plan does not model)."""
    model = SLIDING_WINDOW_MODELS.get(architecture)
    if model is None:
        return 0, ()
    key = f"{architecture}.attention.sliding_window"
    if model.needs_key and not metadata.get(key):
        return 0, ()
    window = _positive(metadata, key, model.default_window)
    flags = metadata.get(f"{architecture}.attention.sliding_window_pattern", model.pattern)
    if isinstance(flags, list):
        if len(flags) < n_layer:
            raise ValueError(
                f"{architecture}.attention.sliding_window_pattern has {len(flags)} entries for "
                f"{n_layer} layers"
            )
        return window, tuple(bool(f) for f in flags[:n_layer])
    n = int(flags)
    return window, tuple(n == 0 or il % n < n - 1 for il in range(n_layer))


def attention_shape(
    architecture: str, metadata: Mapping[str, Any], vocab_size: int | None = None
) -> AttentionShape:
    """The attention structure from GGUF metadata keys (`{arch}.attention.*`, ...)."""
    a = architecture
    block_count = _positive(metadata, f"{a}.block_count")
    # b11434's deepseek4 caches cover every block, MTP (nextn) layers included; other
    # architectures give the nextn layers no KV cache.
    nextn = 0 if a == "deepseek4" else _int(metadata, f"{a}.nextn_predict_layers", 0)
    n_layer = block_count - nextn
    n_embd = _positive(metadata, f"{a}.embedding_length")
    n_head = _positive(metadata, f"{a}.attention.head_count")
    n_head_kv = _per_layer(metadata, f"{a}.attention.head_count_kv", n_layer, n_head)
    head_k = _int(metadata, f"{a}.attention.key_length", n_embd // n_head)
    head_v = _int(metadata, f"{a}.attention.value_length", head_k)
    n_ff = _int(
        metadata,
        f"{a}.expert_feed_forward_length",
        _int(metadata, f"{a}.feed_forward_length", 4 * n_embd),
    )
    n_expert_used = _int(metadata, f"{a}.expert_used_count", 1)
    defaults = {
        f"{a}.attention.head_count_kv": n_head_kv[0] if n_head_kv else n_head,
        f"{a}.attention.key_length": head_k,
        f"{a}.attention.value_length": head_v,
        f"{a}.feed_forward_length": n_ff,
    }
    if f"{a}.expert_count" in metadata:
        defaults[f"{a}.expert_used_count"] = n_expert_used
    missing = [
        key
        for key in defaults
        if key not in metadata
        and not (
            key.endswith(".feed_forward_length") and f"{a}.expert_feed_forward_length" in metadata
        )
    ]
    if vocab_size is None and f"{a}.vocab_size" not in metadata:
        defaults[f"{a}.vocab_size"] = 0
        missing.append(f"{a}.vocab_size")
    assumed = tuple((key, defaults[key]) for key in missing)
    common: dict[str, Any] = {
        "n_layer": n_layer,
        "n_head_kv": n_head_kv,
        "head_k": head_k,
        "head_v": head_v,
        "n_head": n_head,
        "n_embd": n_embd,
        "n_ff": n_ff * max(n_expert_used, 1),
        "n_vocab": vocab_size or _int(metadata, f"{a}.vocab_size", 0),
        "n_expert_used": n_expert_used if f"{a}.expert_count" in metadata else 0,
        "n_ff_dense": _int(metadata, f"{a}.feed_forward_length", 0)
        if _int(metadata, f"{a}.leading_dense_block_count", 0) > 0
        else 0,
        "assumed": assumed,
    }
    if a == "deepseek4":
        return AttentionShape(
            kind="deepseek4",
            architecture=a,
            sliding_window=_int(metadata, f"{a}.attention.sliding_window"),
            compress_ratios=_per_layer(metadata, f"{a}.attention.compress_ratios", n_layer, 0),
            indexer_head=_int(metadata, f"{a}.attention.indexer.key_length"),
            **common,
        )
    if f"{a}.attention.kv_lora_rank" in metadata:
        return AttentionShape(
            kind="mla",
            architecture=a,
            kv_lora_rank=_int(metadata, f"{a}.attention.kv_lora_rank"),
            rope_dim=_int(metadata, f"{a}.rope.dimension_count"),
            **common,
        )
    window, swa_layers = sliding_window(a, metadata, n_layer)
    return AttentionShape(
        kind="standard", sliding_window=window, swa_layers=swa_layers, architecture=a, **common
    )


# -- KV cache -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvLayout:
    """How llama-server lays out the cache for a context, slot count and ubatch."""

    n_ctx: int
    """`-c` padded to 256 (and to a multiple of the slots)."""
    cells: int
    """Cells per stream (`n_ctx_seq`)."""
    streams: int


def kv_layout(ctx_size: int, parallel: int, kv_unified: bool) -> KvLayout:
    """The cells and streams llama_context derives from `-c`, `-np` and `--kv-unified`."""
    cells = slot_cells(ctx_size, parallel, kv_unified)
    if kv_unified:
        return KvLayout(n_ctx=cells, cells=cells, streams=1)
    return KvLayout(n_ctx=cells * parallel, cells=cells, streams=parallel)


@dataclass(frozen=True)
class KvLayers:
    """KV bytes per layer: cache tensors (what `llama_kv_cache: size` logs) and extra state."""

    cache: tuple[int, ...]
    state: tuple[int, ...]

    @property
    def cache_bytes(self) -> int:
        """Sum of the cache tensors."""
        return sum(self.cache)

    @property
    def state_bytes(self) -> int:
        """Sum of the recurrent/compressor state."""
        return sum(self.state)

    @property
    def total(self) -> tuple[int, ...]:
        """Cache and state per layer."""
        return tuple(c + s for c, s in zip(self.cache, self.state, strict=True))


def kv_cache_layers(
    shape: AttentionShape,
    ctx_size: int,
    parallel: int = 1,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    *,
    ubatch: int = DEFAULT_UBATCH,
    batch: int = DEFAULT_BATCH,
    kv_unified: bool = False,
    swa_full: bool = False,
    n_rs_seq: int = 0,
) -> KvLayers:
    """KV cache bytes per layer as llama-server b11434 allocates them."""
    layout = kv_layout(ctx_size, parallel, kv_unified)
    n = shape.n_layer
    if shape.kind == "standard":
        # llama_kv_cache_iswa: the window for each sequence (all of them in one unified
        # stream), plus a ubatch, padded to 256 and never more than the full cache.
        unified_seqs = parallel if kv_unified else 1
        swa_cells = pad(min(layout.cells, shape.sliding_window * unified_seqs + min(ubatch, batch)))
        cells = [
            swa_cells if il < len(shape.swa_layers) and shape.swa_layers[il] and not swa_full
            else layout.cells
            for il in range(n)
        ]  # fmt: skip
        cache = tuple(
            layout.streams
            * cells[il]
            * (
                row_bytes(cache_type_k, shape.n_head_kv[il] * shape.head_k)
                + row_bytes(cache_type_v, shape.n_head_kv[il] * shape.head_v)
            )
            for il in range(n)
        )
        return KvLayers(cache, (0,) * n)
    if shape.kind == "mla":
        row = row_bytes(cache_type_k, shape.kv_lora_rank + shape.rope_dim)
        return KvLayers((layout.streams * layout.cells * row,) * n, (0,) * n)
    return _deepseek4_layers(
        shape, layout.cells, parallel, cache_type_k, min(ubatch, batch), swa_full, n_rs_seq
    )


def _deepseek4_layers(
    shape: AttentionShape,
    kv: int,
    streams: int,
    cache_type: str,
    n_ubatch: int,
    swa_full: bool,
    n_rs_seq: int,
) -> KvLayers:
    # Every deepseek4 cache keeps one stream per sequence of n_ctx_seq cells, even with
    # --kv-unified (where n_ctx_seq is the whole context): KV grows with the slot count.
    window = kv if swa_full else pad(min(kv, shape.sliding_window + n_ubatch))
    head = shape.head_k
    planes = streams * (1 + n_rs_seq)
    f32 = 4
    cache: list[int] = []
    state: list[int] = []
    for il in range(shape.n_layer):
        raw = window * row_bytes(cache_type, shape.n_head_kv[il] * head)
        ratio = shape.compress_ratios[il]
        comp = 0
        st = 0
        if ratio == DSV4_CSA_RATIO:
            cells = pad(max(1, math.ceil(kv / ratio)))
            comp = cells * (row_bytes(cache_type, head) + row_bytes(cache_type, shape.indexer_head))
            st = 2 * f32 * (2 * head * 2 * ratio + 2 * shape.indexer_head * 2 * ratio)
        elif ratio == DSV4_HCA_RATIO:
            comp = pad(max(1, math.ceil(kv / ratio))) * row_bytes(cache_type, head)
            st = 2 * f32 * head * ratio
        elif ratio != 0:
            raise ValueError(f"deepseek4 layer {il}: unsupported compression ratio {ratio}")
        cache.append(streams * (raw + comp))
        state.append(planes * st)
    return KvLayers(tuple(cache), tuple(state))
