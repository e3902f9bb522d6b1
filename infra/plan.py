"""Memory and disk plans of a stack, computed before anything is downloaded or started.

Pure functions over plain inputs. A llama.cpp plan places the weights, KV cache and compute
buffers the way llama-server b11434 does:

- `-ngl N` offloads the output layer first, then the last N-1 repeating layers
  (`i_gpu_start = n_layer + 1 - N`); `token_embd` always stays on the CPU. So `-ngl 43` of a
  43-layer model still keeps layer 0 on the CPU; `-ngl 44` offloads everything.
- The KV cache of a layer lives on that layer's device (`--kv-offload`, the default).
- `-c` is padded to 256; with an explicit `-np N` the cache is per sequence (`kv_unified` off):
  N streams of `pad256(c / N)` cells. With `kv_unified` one stream of `c` cells, except that the
  deepseek4 cache always keeps one stream per sequence, each sized for the full context.
- Host memory in the container: CPU-resident weights and KV, the CPU compute buffer, the
  prompt cache (`--cache-ram`, default 8192 MiB) and a runtime allowance.

KV cache sizes follow llama.cpp's cache constructors (`llama-kv-cache*.cpp`):

- standard: sum over layers of cells x (row(n_head_kv x head_k, type_k) + row(n_head_kv x
  head_v, type_v));
- MLA (deepseek2/3, `attention.kv_lora_rank`): K only, row(kv_lora_rank + rope dims);
- deepseek4 (K only, head `attention.key_length`), per stream with context C and ubatch u:
  every layer keeps a raw sliding window of pad256(min(C, `attention.sliding_window` + u))
  cells; layers whose `attention.compress_ratios` entry is 4 add pad256(ceil(C/4)) compressed
  cells plus an indexer cache of the same length with rows of `attention.indexer.key_length`;
  ratio-128 layers add pad256(ceil(C/128)) cells; and F32 compressor state per stream
  (2 x 2·head x 8 per ratio-4 layer, 2 x head x 128 per ratio-128 layer, 2 x 2·indexer x 8 per
  ratio-4 layer).

Compute buffers are an estimate (see `compute_buffer_bytes`), overridable per device.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from components.gguf_header import row_bytes

GIB = 1 << 30
MIB = 1 << 20
GB = 10**9
KV_PAD = 256
DEFAULT_CACHE_RAM_MIB = 8192
DEFAULT_UBATCH = 512
DEFAULT_BATCH = 2048
# llama.cpp's deepseek4 cache: compressed-sparse (CSA) and heavily-compressed (HCA) layers.
DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128
# Tensors llama.cpp loads as the input layer, which it never offloads.
INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.")

WeightSource = Literal["GGUF header", "lock summary", "file sizes + layer structure"]
AttentionKind = Literal["standard", "mla", "deepseek4"]


class PlanError(ValueError):
    """A stack whose plan does not fit: one line per device, each with the numbers and a fix."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def pad(value: int, multiple: int = KV_PAD) -> int:
    """`value` rounded up to a multiple (GGML_PAD)."""
    return -(-value // multiple) * multiple


def gib(value: float) -> float:
    """Bytes as GiB."""
    return value / GIB


def _fmt(value_bytes: float) -> str:
    """A size for people: GiB above 1 GiB, else MiB."""
    if abs(value_bytes) >= GIB:
        return f"{value_bytes / GIB:.1f} GiB"
    return f"{value_bytes / MIB:.0f} MiB"


def _num(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


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
    """deepseek4: raw window of every layer (`attention.sliding_window`)."""
    compress_ratios: tuple[int, ...] = ()
    """deepseek4: per-layer compression ratio (0, 4 or 128)."""
    indexer_head: int = 0
    """deepseek4: lightning-indexer row width (`attention.indexer.key_length`)."""
    n_head: int = 0
    n_embd: int = 0
    n_ff: int = 0
    n_vocab: int = 0


def _int(metadata: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = metadata.get(key, default)
    if isinstance(value, list):
        value = max(value) if value else default
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"model metadata lacks {key}")
    return int(value)


def _per_layer(
    metadata: Mapping[str, Any], key: str, n_layer: int, default: int
) -> tuple[int, ...]:
    value = metadata.get(key, default)
    if isinstance(value, list):
        if len(value) < n_layer:
            raise ValueError(f"{key} has {len(value)} entries for {n_layer} layers")
        return tuple(int(v) for v in value[:n_layer])
    return (int(value),) * n_layer


def attention_shape(
    architecture: str, metadata: Mapping[str, Any], vocab_size: int | None = None
) -> AttentionShape:
    """The attention structure from GGUF metadata keys (`{arch}.attention.*`, ...)."""
    a = architecture
    block_count = _int(metadata, f"{a}.block_count")
    # b11434's deepseek4 caches cover every block, MTP (nextn) layers included; other
    # architectures give the nextn layers no KV cache.
    nextn = 0 if a == "deepseek4" else _int(metadata, f"{a}.nextn_predict_layers", 0)
    n_layer = block_count - nextn
    n_embd = _int(metadata, f"{a}.embedding_length")
    n_head = _int(metadata, f"{a}.attention.head_count")
    n_head_kv = _per_layer(metadata, f"{a}.attention.head_count_kv", n_layer, n_head)
    head_k = _int(metadata, f"{a}.attention.key_length", n_embd // n_head)
    head_v = _int(metadata, f"{a}.attention.value_length", head_k)
    n_ff = _int(
        metadata,
        f"{a}.expert_feed_forward_length",
        _int(metadata, f"{a}.feed_forward_length", 4 * n_embd),
    )
    n_expert_used = _int(metadata, f"{a}.expert_used_count", 1)
    common: dict[str, Any] = {
        "n_layer": n_layer,
        "n_head_kv": n_head_kv,
        "head_k": head_k,
        "head_v": head_v,
        "n_head": n_head,
        "n_embd": n_embd,
        "n_ff": n_ff * max(n_expert_used, 1),
        "n_vocab": vocab_size or _int(metadata, f"{a}.vocab_size", 0),
    }
    if a == "deepseek4":
        return AttentionShape(
            kind="deepseek4",
            sliding_window=_int(metadata, f"{a}.attention.sliding_window"),
            compress_ratios=_per_layer(metadata, f"{a}.attention.compress_ratios", n_layer, 0),
            indexer_head=_int(metadata, f"{a}.attention.indexer.key_length"),
            **common,
        )
    if f"{a}.attention.kv_lora_rank" in metadata:
        return AttentionShape(
            kind="mla",
            kv_lora_rank=_int(metadata, f"{a}.attention.kv_lora_rank"),
            rope_dim=_int(metadata, f"{a}.rope.dimension_count"),
            **common,
        )
    return AttentionShape(kind="standard", **common)


@dataclass(frozen=True)
class ModelWeights:
    """Where a model's weight bytes are: per repeating layer, the input layer, the rest."""

    layer_bytes: tuple[int, ...]
    input_bytes: int
    """`token_embd` and other input tensors: always on the CPU."""
    output_bytes: int
    """Every other non-layer tensor (output, output_norm, ...): the output layer's device."""
    source: WeightSource

    @property
    def total_bytes(self) -> int:
        """All weight bytes."""
        return sum(self.layer_bytes) + self.input_bytes + self.output_bytes

    @classmethod
    def from_summary(
        cls, summary: Mapping[str, Any], source: WeightSource = "lock summary"
    ) -> ModelWeights:
        """From a `components.gguf_header.summarize` summary."""
        other: Mapping[str, int] = summary["other_tensors"]
        inputs = sum(b for n, b in other.items() if n.startswith(INPUT_TENSORS))
        return cls(
            layer_bytes=tuple(int(b) for b in summary["layer_bytes"]),
            input_bytes=inputs,
            output_bytes=sum(other.values()) - inputs,
            source=source,
        )

    @classmethod
    def from_file_sizes(cls, total_bytes: int, n_layer: int) -> ModelWeights:
        """Without a header: the files' bytes spread evenly over the layers (conservative for
        the GPU, since the CPU-only input layer is counted as layer weight)."""
        per_layer, rest = divmod(total_bytes, n_layer)
        layers = tuple(per_layer + (1 if i < rest else 0) for i in range(n_layer))
        return cls(layers, 0, 0, "file sizes + layer structure")


@dataclass(frozen=True)
class LlamaCppPlanInputs:
    """Everything a llama-server memory plan depends on."""

    weights: ModelWeights
    attention: AttentionShape
    gpu_layers: int
    """`-ngl` (`server.gpuLayers`)."""
    ctx_size: int
    """`-c` (`server.contextSize`)."""
    parallel: int = 1
    """`-np` (`server.parallel`)."""
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    ubatch: int = DEFAULT_UBATCH
    batch: int = DEFAULT_BATCH
    kv_unified: bool = False
    """llama-server turns it on only when `-np` is auto; the renderer always passes `-np`."""
    flash_attn: bool = True
    """`-fa auto` resolves to on for Vulkan and CPU (and quantized V caches require it)."""
    swa_full: bool = False
    vram_bytes: int | None = None
    """GPU memory available to llama-server; None: no GPU (everything on the CPU)."""
    memory_limit_bytes: int | None = None
    """Container memory limit (`server.resources.limits.memory`); None: not checked."""
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    """`--cache-ram`: prompt cache in host RAM, counted against the memory limit."""
    runtime_bytes: int = 512 * MIB
    """Process, driver and allocator overhead in host RAM."""
    compute_override_bytes: Mapping[str, int] = field(default_factory=dict)
    """Measured compute buffers by device (`vram`, `ram`), replacing the estimate."""
    disk_bytes: int | None = None
    """Model volume size (`store.size`); None: not checked."""
    model_file_bytes: int | None = None
    """Bytes of the model files on disk (lock sizes); default: the weight bytes."""
    disk_headroom_fraction: float = 0.02
    """Free space kept on the volume (temporary download names, filesystem overhead)."""
    n_rs_seq: int = 0
    """deepseek4 compressor-state rollback planes (speculative decoding only)."""


@dataclass(frozen=True)
class Device:
    """One budget: a capacity and what is placed in it."""

    capacity_bytes: int | None
    items: dict[str, int]

    @property
    def used_bytes(self) -> int:
        """Sum of the items."""
        return sum(self.items.values())

    @property
    def fits(self) -> bool:
        """Whether the items fit the capacity (an unknown capacity fits)."""
        return self.capacity_bytes is None or self.used_bytes <= self.capacity_bytes

    def to_json(self) -> dict[str, Any]:
        """The plan contract's device object, in GiB."""
        capacity = self.capacity_bytes
        return {
            "capacity_gib": None if capacity is None else round(gib(capacity), 3),
            "used_gib": round(gib(self.used_bytes), 3),
            "free_gib": None if capacity is None else round(gib(capacity - self.used_bytes), 3),
            "items": {k: round(gib(v), 3) for k, v in self.items.items()},
        }


@dataclass(frozen=True)
class TableRow:
    """One line of the plan table."""

    component: str
    size_bytes: int
    where: str


@dataclass(frozen=True)
class Plan:
    """A memory/disk plan: devices with their items, advice, and the rows of its table."""

    devices: dict[str, Device]
    advice: list[str]
    problems: list[str]
    """Refusal lines (`plan: does not fit in ...`); empty when the plan fits."""
    rows: list[TableRow]
    notes: list[str]
    source: str

    @property
    def fits(self) -> bool:
        """Whether every device fits."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The plan output contract (`llm-infra plan --json`)."""
        return {
            "fits": self.fits,
            "devices": {name: device.to_json() for name, device in self.devices.items()},
            "advice": [*self.problems, *self.advice],
        }

    def check(self) -> None:
        """Raise PlanError when the plan does not fit."""
        if self.problems:
            raise PlanError(self.problems)

    def table(self) -> str:
        """The budget as a text table (component, size, where), the totals and the verdict."""
        width = max([len(r.component) for r in self.rows] + [len("component")])
        lines = [f"{'component':<{width}}  {'size':>10}  where", "-" * (width + 24)]
        lines += [f"{r.component:<{width}}  {_fmt(r.size_bytes):>10}  {r.where}" for r in self.rows]
        lines.append("-" * (width + 24))
        for name, device in self.devices.items():
            capacity = device.capacity_bytes
            limit = "no limit" if capacity is None else f"of {_fmt(capacity)}"
            free = "" if capacity is None else f", {_fmt(capacity - device.used_bytes)} free"
            lines.append(
                f"{'total ' + name:<{width}}  {_fmt(device.used_bytes):>10}  {limit}{free}"
            )
        lines.append(f"weights from: {self.source}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("verdict: fits" if self.fits else "verdict: DOES NOT FIT")
        lines += self.problems
        lines += [f"advice: {a}" for a in self.advice]
        return "\n".join(lines)


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
    n_ctx = pad(ctx_size)
    if kv_unified:
        return KvLayout(n_ctx=n_ctx, cells=n_ctx, streams=1)
    cells = pad(n_ctx // parallel)
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
        cache = tuple(
            layout.streams
            * layout.cells
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


def deepseek4_kv_bytes(
    shape: AttentionShape, ctx_size: int, parallel: int = 1, cache_type: str = "q8_0"
) -> int:
    """deepseek4 cache and compressor state in bytes (REFERENCE.md's formula)."""
    layers = kv_cache_layers(shape, ctx_size, parallel, cache_type, cache_type)
    return layers.cache_bytes + layers.state_bytes


# -- compute buffers ------------------------------------------------------------------------


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


# -- llama.cpp plan -------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Which repeating layers and which non-layer tensors go to the GPU for an `-ngl`."""

    gpu_layers: tuple[int, ...]
    cpu_layers: tuple[int, ...]
    output_on_gpu: bool


def placement(n_layer: int, gpu_layers: int, has_gpu: bool = True) -> Placement:
    """llama.cpp's assignment: output layer first, then the last `gpu_layers - 1` layers."""
    if not has_gpu or gpu_layers <= 0:
        return Placement((), tuple(range(n_layer)), False)
    start = max(n_layer + 1 - gpu_layers, 0)
    return Placement(tuple(range(start, n_layer)), tuple(range(start)), True)


def _llamacpp_devices(inputs: LlamaCppPlanInputs) -> tuple[dict[str, Device], Placement]:
    weights = inputs.weights
    n_layer = len(weights.layer_bytes)
    has_gpu = inputs.vram_bytes is not None
    place = placement(n_layer, inputs.gpu_layers, has_gpu)
    kv = _kv_layers(inputs).total
    n_kv = len(kv)
    gpu_kv = sum(kv[il] for il in place.gpu_layers if il < n_kv)
    cpu_kv = sum(kv[il] for il in place.cpu_layers if il < n_kv)
    estimate = compute_buffer_bytes(
        inputs.attention,
        inputs.ctx_size,
        min(inputs.ubatch, inputs.batch),
        flash_attn=inputs.flash_attn,
    )
    override = inputs.compute_override_bytes
    gpu_weights = sum(weights.layer_bytes[il] for il in place.gpu_layers)
    cpu_weights = sum(weights.layer_bytes[il] for il in place.cpu_layers) + weights.input_bytes
    if place.output_on_gpu:
        gpu_weights += weights.output_bytes
    else:
        cpu_weights += weights.output_bytes
    devices: dict[str, Device] = {}
    if has_gpu:
        devices["vram"] = Device(
            inputs.vram_bytes,
            {
                "weights": gpu_weights,
                "kv_cache": gpu_kv,
                "compute": override.get("vram", estimate if place.output_on_gpu else 0),
            },
        )
    # With every layer on the GPU the CPU graph only embeds the input tokens.
    cpu_compute = estimate if place.cpu_layers or not has_gpu else 64 * MIB
    devices["ram"] = Device(
        inputs.memory_limit_bytes,
        {
            "weights": cpu_weights,
            "kv_cache": cpu_kv,
            "compute": override.get("ram", cpu_compute),
            "prompt_cache": max(inputs.cache_ram_mib, 0) * MIB,
            "runtime": inputs.runtime_bytes,
        },
    )
    if inputs.disk_bytes is not None:
        files = inputs.model_file_bytes or weights.total_bytes
        reserve = int(inputs.disk_bytes * inputs.disk_headroom_fraction)
        devices["disk"] = Device(inputs.disk_bytes, {"model_files": files, "reserve": reserve})
    return devices, place


def _fits(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> bool:
    devices, _ = _llamacpp_devices(inputs)
    for name in ("vram", "ram"):
        device = devices.get(name)
        if device is None or device.capacity_bytes is None:
            continue
        if device.used_bytes + headroom_bytes * (name == "vram") > device.capacity_bytes:
            return False
    return True


def max_gpu_layers(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> int | None:
    """The highest `-ngl` whose VRAM budget fits with `headroom_bytes` spare (None: not even 0).

    Only VRAM is checked: fewer GPU layers need more host memory, which is reported apart.
    """
    best = None
    for ngl in range(len(inputs.weights.layer_bytes) + 2):
        devices, _ = _llamacpp_devices(replace(inputs, gpu_layers=ngl))
        vram = devices.get("vram")
        if vram is None or vram.capacity_bytes is None:
            return len(inputs.weights.layer_bytes) + 1
        if vram.used_bytes + headroom_bytes <= vram.capacity_bytes:
            best = ngl
    return best


def max_context(
    inputs: LlamaCppPlanInputs, headroom_bytes: int = 0, step: int = 1024, limit: int = 1 << 24
) -> int | None:
    """The largest `-c` (a multiple of `step`) that fits VRAM (with headroom) and host memory."""
    if not _fits(replace(inputs, ctx_size=step * inputs.parallel), headroom_bytes):
        return None
    low, high = 1, limit // step
    while low < high:
        mid = (low + high + 1) // 2
        if _fits(replace(inputs, ctx_size=mid * step), headroom_bytes):
            low = mid
        else:
            high = mid - 1
    return low * step


@dataclass(frozen=True)
class Suggestion:
    """The highest `-ngl`, then the largest context at it, that fit with the headroom."""

    gpu_layers: int | None
    ctx_size: int | None
    headroom_bytes: int


def suggest(inputs: LlamaCppPlanInputs, headroom_gib: float = 4.0, step: int = 1024) -> Suggestion:
    """Highest `-ngl` and largest context (at that `-ngl`) that leave `headroom_gib` free."""
    headroom = int(headroom_gib * GIB)
    ngl = max_gpu_layers(inputs, headroom)
    if ngl is None:
        return Suggestion(None, None, headroom)
    ctx = max_context(replace(inputs, gpu_layers=ngl), headroom, step)
    return Suggestion(ngl, ctx, headroom)


def _layers_text(place: Placement, n_layer: int) -> tuple[str, str]:
    gpu = len(place.gpu_layers)
    out = " + output" if place.output_on_gpu else ""
    if place.cpu_layers:
        cpu = f"layers 0-{place.cpu_layers[-1]}" if len(place.cpu_layers) > 1 else "layer 0"
    else:
        cpu = "no layers"
    return f"{gpu} of {n_layer} layers{out}", cpu


def plan_llamacpp(inputs: LlamaCppPlanInputs) -> Plan:
    """The llama-server plan: VRAM, container memory, model volume, with refusals and advice."""
    devices, place = _llamacpp_devices(inputs)
    weights = inputs.weights
    n_layer = len(weights.layer_bytes)
    gpu_text, cpu_text = _layers_text(place, n_layer)
    layout = kv_layout(inputs.ctx_size, inputs.parallel, inputs.kv_unified)
    kv_what = (
        f"KV cache ({inputs.cache_type_k}/{inputs.cache_type_v}, "
        f"{layout.cells} cells x {layout.streams} slot{'s' if layout.streams > 1 else ''})"
    )
    rows: list[TableRow] = []
    vram, ram = devices.get("vram"), devices["ram"]
    if vram is not None:
        rows += [
            TableRow(f"weights ({gpu_text})", vram.items["weights"], "VRAM"),
            TableRow(kv_what, vram.items["kv_cache"], "VRAM"),
            TableRow("compute buffers", vram.items["compute"], "VRAM"),
        ]
    rows += [
        TableRow(f"weights ({cpu_text} + token_embd)", ram.items["weights"], "RAM (container)"),
        TableRow("KV cache (CPU layers)", ram.items["kv_cache"], "RAM (container)"),
        TableRow("compute buffers (CPU)", ram.items["compute"], "RAM (container)"),
        TableRow(f"prompt cache (--cache-ram {inputs.cache_ram_mib})", ram.items["prompt_cache"],
                 "RAM (container)"),
        TableRow("runtime", ram.items["runtime"], "RAM (container)"),
    ]  # fmt: skip
    if "disk" in devices:
        rows.append(TableRow("model files", devices["disk"].items["model_files"], "model volume"))
    notes = _notes(inputs)
    problems: list[str] = []
    advice: list[str] = []
    if vram is not None and not vram.fits:
        problems.append(_vram_refusal(inputs, vram, gpu_text))
    if not ram.fits:
        problems.append(_ram_refusal(inputs, ram, cpu_text))
    disk = devices.get("disk")
    if disk is not None and not disk.fits:
        need = math.ceil(gib(disk.items["model_files"]) / (1 - inputs.disk_headroom_fraction))
        problems.append(
            f"plan: does not fit on the model volume: {_fmt(disk.used_bytes)} needed of "
            f"{_fmt(disk.capacity_bytes or 0)} (model files {_fmt(disk.items['model_files'])}, "
            f"reserve {_fmt(disk.items['reserve'])}): raise store.size to at least {need}Gi"
        )
    if vram is not None and vram.fits and place.cpu_layers:
        best = max_gpu_layers(inputs)
        if best is not None and best > inputs.gpu_layers:
            advice.append(
                f"server.gpuLayers {inputs.gpu_layers} fits with "
                f"{_fmt((vram.capacity_bytes or 0) - vram.used_bytes)} VRAM free; up to {best} "
                "would still fit (with no headroom)"
            )
    return Plan(devices, advice, problems, rows, notes, weights.source)


def _kv_layers(inputs: LlamaCppPlanInputs) -> KvLayers:
    """The KV cache per layer for the plan's settings."""
    return kv_cache_layers(
        inputs.attention,
        inputs.ctx_size,
        inputs.parallel,
        inputs.cache_type_k,
        inputs.cache_type_v,
        ubatch=inputs.ubatch,
        batch=inputs.batch,
        kv_unified=inputs.kv_unified,
        swa_full=inputs.swa_full,
        n_rs_seq=inputs.n_rs_seq,
    )


def _notes(inputs: LlamaCppPlanInputs) -> list[str]:
    notes = []
    shape = inputs.attention
    if shape.kind == "deepseek4":
        kv = _kv_layers(inputs)
        notes.append(
            f"deepseek4 KV cache {_fmt(kv.cache_bytes + kv.state_bytes)} (compressor state "
            f"{_fmt(kv.state_bytes)} included): K-only, a {shape.sliding_window}-token window "
            "and 4x/128x compressed layers, not the 576-elements/token/layer MLA of DeepSeek "
            "V2/V3 that seed 000 assumed (~1.6 GiB at 64k q8_0, 1 slot)"
        )
    n_layer = len(inputs.weights.layer_bytes)
    if 0 < inputs.gpu_layers <= n_layer:
        notes.append(
            f"-ngl {inputs.gpu_layers} puts the output layer and {inputs.gpu_layers - 1} "
            f"repeating layers on the GPU (llama.cpp offloads the output layer first); "
            f"-ngl {n_layer + 1} offloads all {n_layer} layers"
        )
    return notes


def _vram_refusal(inputs: LlamaCppPlanInputs, vram: Device, gpu_text: str) -> str:
    cap = vram.capacity_bytes or 0
    items = vram.items
    detail = (
        f"weights {_fmt(items['weights'])} for {gpu_text}, KV cache {_fmt(items['kv_cache'])}, "
        f"compute {_fmt(items['compute'])}"
    )
    fixes = []
    best = max_gpu_layers(inputs)
    if best is not None:
        fixes.append(f"set server.gpuLayers to at most {best}")
    ctx = max_context(inputs)
    if ctx is not None and ctx >= 256:
        fixes.append(f"lower server.contextSize to at most {ctx}")
    if not fixes:
        fixes.append("the model does not fit this GPU at any server.gpuLayers")
    return (
        f"plan: does not fit in VRAM: {_fmt(vram.used_bytes)} needed of {_num(gib(cap))} GiB "
        f"({detail}): {' or '.join(fixes)}"
    )


def _ram_refusal(inputs: LlamaCppPlanInputs, ram: Device, cpu_text: str) -> str:
    cap = ram.capacity_bytes or 0
    items = ram.items
    detail = (
        f"weights {_fmt(items['weights'])} for {cpu_text} + token_embd, "
        f"KV cache {_fmt(items['kv_cache'])}, compute {_fmt(items['compute'])}, "
        f"prompt cache {_fmt(items['prompt_cache'])} (--cache-ram {inputs.cache_ram_mib}), "
        f"runtime {_fmt(items['runtime'])}"
    )
    need_gi = math.ceil(gib(ram.used_bytes))
    fixes = [f"raise server.resources.limits.memory to at least {need_gi}Gi"]
    over = ram.used_bytes - cap
    if items["prompt_cache"] >= over:
        fixes.append(f"set server.cacheRam to at most {(items['prompt_cache'] - over) // MIB} MiB")
    return (
        f"plan: does not fit in the container memory limit: {_fmt(ram.used_bytes)} needed of "
        f"{_num(gib(cap))} GiB ({detail}): {' or '.join(fixes)}"
    )


def llamacpp_inputs_from_summary(
    summary: Mapping[str, Any], source: WeightSource = "lock summary", **settings: Any
) -> LlamaCppPlanInputs:
    """Plan inputs from a GGUF summary and the server settings (LlamaCppPlanInputs fields)."""
    shape = attention_shape(summary["architecture"], summary["metadata"], summary.get("vocab_size"))
    return LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary, source), attention=shape, **settings
    )


# -- vLLM on one MI300X ---------------------------------------------------------------------


@dataclass(frozen=True)
class VllmPlanInputs:
    """What a vLLM (ROCm) plan on one GPU host depends on; seed 002's values as defaults."""

    weights_bytes: int = int(156.67 * GIB)
    """Checkpoint bytes; all of it stays in HBM (no offload)."""
    hbm_bytes: int = 192 * GIB
    """MI300X: 192 GiB HBM3 (rocm-smi reports ~191.98 GiB)."""
    kv_cache_memory_bytes: int = 20 * GB
    """`--kv-cache-memory-bytes` (vLLM parses `20G` as 20·10^9)."""
    activation_reserve_bytes: int = 6 * GIB
    """Activations of a scheduler step (`--max-num-batched-tokens`), HIP graphs, RCCL, allocator
    fragmentation: vLLM's profiling run needs it on top of weights and KV."""
    host_ram_bytes: int = 235 * GIB
    cpu_kv_tier_bytes: int = 96 * GIB
    """`--kv-offloading-size 96` (GiB), pinned host memory."""
    host_runtime_bytes: int = 24 * GIB
    """vLLM processes, torch/ROCm libraries, compile workers, safetensors page cache at load."""
    host_os_reserve_bytes: int = 8 * GIB
    disk_bytes: int = 500 * GB
    image_bytes: int = 40 * GB
    """The vLLM ROCm image, unpacked."""
    disk_headroom_bytes: int = 30 * GB
    """Logs, compile caches, a second image during an update."""


def plan_vllm(inputs: VllmPlanInputs) -> Plan:
    """HBM, host RAM and disk of a vLLM server holding every weight in HBM."""
    devices = {
        "hbm": Device(
            inputs.hbm_bytes,
            {
                "weights": inputs.weights_bytes,
                "kv_cache": inputs.kv_cache_memory_bytes,
                "activations": inputs.activation_reserve_bytes,
            },
        ),
        "ram": Device(
            inputs.host_ram_bytes,
            {
                "cpu_kv_tier": inputs.cpu_kv_tier_bytes,
                "runtime": inputs.host_runtime_bytes,
                "os": inputs.host_os_reserve_bytes,
            },
        ),
        "disk": Device(
            inputs.disk_bytes,
            {
                "weights": inputs.weights_bytes,
                "image": inputs.image_bytes,
                "headroom": inputs.disk_headroom_bytes,
            },
        ),
    }
    rows = [
        TableRow("weights", inputs.weights_bytes, "HBM"),
        TableRow("GPU KV cache (--kv-cache-memory-bytes)", inputs.kv_cache_memory_bytes, "HBM"),
        TableRow("activations, graphs, allocator", inputs.activation_reserve_bytes, "HBM"),
        TableRow("CPU KV tier (--kv-offloading-size)", inputs.cpu_kv_tier_bytes, "host RAM"),
        TableRow("vLLM runtime", inputs.host_runtime_bytes, "host RAM"),
        TableRow("OS", inputs.host_os_reserve_bytes, "host RAM"),
        TableRow("weights", inputs.weights_bytes, "disk"),
        TableRow("image", inputs.image_bytes, "disk"),
        TableRow("headroom", inputs.disk_headroom_bytes, "disk"),
    ]
    problems = []
    hbm, ram, disk = devices["hbm"], devices["ram"], devices["disk"]
    if not hbm.fits:
        room = (hbm.capacity_bytes or 0) - inputs.weights_bytes - inputs.activation_reserve_bytes
        fix = (
            f"lower server.kvCacheMemoryBytes to at most {max(room, 0) // GB}G"
            if room > 0
            else "the weights do not fit this GPU"
        )
        problems.append(
            f"plan: does not fit in HBM: {_fmt(hbm.used_bytes)} needed of "
            f"{_num(gib(hbm.capacity_bytes or 0))} GiB (weights {_fmt(inputs.weights_bytes)}, "
            f"KV cache {_fmt(inputs.kv_cache_memory_bytes)}, activations "
            f"{_fmt(inputs.activation_reserve_bytes)}): {fix}"
        )
    if not ram.fits:
        room = (ram.capacity_bytes or 0) - inputs.host_runtime_bytes - inputs.host_os_reserve_bytes
        problems.append(
            f"plan: does not fit in host RAM: {_fmt(ram.used_bytes)} needed of "
            f"{_num(gib(ram.capacity_bytes or 0))} GiB (CPU KV tier "
            f"{_fmt(inputs.cpu_kv_tier_bytes)}, runtime {_fmt(inputs.host_runtime_bytes)}, OS "
            f"{_fmt(inputs.host_os_reserve_bytes)}): set server.kvOffloadingSize to at most "
            f"{max(room, 0) // GIB} (GiB)"
        )
    if not disk.fits:
        problems.append(
            f"plan: does not fit on disk: {_fmt(disk.used_bytes)} needed of "
            f"{_fmt(disk.capacity_bytes or 0)} (weights {_fmt(inputs.weights_bytes)}, image "
            f"{_fmt(inputs.image_bytes)}, headroom {_fmt(inputs.disk_headroom_bytes)}): free "
            f"{_fmt(disk.used_bytes - (disk.capacity_bytes or 0))} on the host or use a larger "
            f"disk"
        )
    advice = []
    # Seed 002: free HBM is small, so context, KV or concurrency changes can run out of memory.
    if hbm.fits and (hbm.capacity_bytes or 0) - hbm.used_bytes < 0.1 * (hbm.capacity_bytes or 0):
        advice.append(
            f"HBM has {_fmt((hbm.capacity_bytes or 0) - hbm.used_bytes)} free: raising the "
            "context, KV cache or concurrency can run out of memory"
        )
    return Plan(devices, advice, problems, rows, [], "checkpoint size")


def parse_vllm_bytes(value: str | int) -> int:
    """A vLLM byte size (`20G`, `20GiB`, `512M`, an integer) in bytes."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?)?b?\s*", value, re.IGNORECASE)
    if match is None:
        raise ValueError(f"{value!r} is not a byte size")
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}  # fmt: skip
    unit = (match[2] or "").lower()
    return int(float(match[1]) * units.get(unit, 1))
