"""The llama-server memory and disk plan: weights, placement, KV cache, compute buffers.

Pure functions over plain inputs. A llama.cpp plan places the weights, KV cache and compute
buffers the way llama-server b11434 does:

- `-ngl N` offloads the output layer first, then the last N-1 repeating layers
  (`i_gpu_start = n_layer + 1 - N`); `token_embd` always stays on the CPU. So `-ngl 43` of a
  43-layer model still keeps layer 0 on the CPU; `-ngl 44` offloads everything.
- The KV cache of a layer lives on that layer's device (`--kv-offload`, the default); its cells,
  streams and bytes are `infra.plan.deepseek4`'s.
- Host memory in the container: CPU-resident weights and KV, the CPU compute buffer, the
  prompt cache (`--cache-ram`, default 8192 MiB) and a runtime allowance.

Compute buffers are estimates, overridable per device: `vulkan_compute_bytes` for llama-style
attention (measured on a Vulkan GPU: the host's buffer whenever layers are offloaded, the GPU's
over an F16 KV cache), else the upper bound `compute_buffer_bytes`. A runtime of another GPU
backend (ROCm) was not measured: it takes the upper bound, and the plan says so as an assumption.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from components.gguf_header import INPUT_TENSORS
from components.model_store.inputs import CpuVariant
from infra.plan.deepseek4 import (
    DEFAULT_BATCH,
    DEFAULT_UBATCH,
    AttentionShape,
    KvLayers,
    kv_cache_layers,
    kv_layout,
    pad,
)
from infra.plan.extra_args import CpuTensors
from infra.plan.repack import CPU_VARIANTS, MAX_GROWTH, MatmulWeight, Repack, repack, worst_repack
from infra.plan.report import (
    GIB,
    MIB,
    Device,
    Fix,
    Plan,
    TableRow,
    fmt_num,
    fmt_size,
    gib,
)

DEFAULT_CACHE_RAM_MIB = 8192

WeightSource = Literal["GGUF header", "lock summary", "file sizes + layer structure"]


@dataclass(frozen=True)
class ModelWeights:
    """Where a model's weight bytes are: per repeating layer, the input layer, the rest."""

    layer_bytes: tuple[int, ...]
    input_bytes: int
    """`token_embd` and other input tensors: always on the CPU."""
    output_bytes: int
    """Every other non-layer tensor (output, output_norm, ...): the output layer's device."""
    source: WeightSource
    matmul_weights: Mapping[str, tuple[MatmulWeight, ...]] | None = None
    """Matrix weights by layer index (`"0"`, ...) and `"output"`, for the CPU repack rules;
    None when the source has no per-tensor types (a schema 1 summary, file sizes)."""

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
        listed: Mapping[str, Mapping[str, int]] | None = summary.get("matmul_weights")
        matmul = None
        if listed is not None:
            matmul = {
                where: tuple(_matmul_weight(key, count) for key, count in found.items())
                for where, found in listed.items()
            }
        return cls(
            layer_bytes=tuple(int(b) for b in summary["layer_bytes"]),
            input_bytes=inputs,
            output_bytes=sum(other.values()) - inputs,
            source=source,
            matmul_weights=matmul,
        )

    @classmethod
    def from_file_sizes(cls, total_bytes: int, n_layer: int) -> ModelWeights:
        """Without a header: the files' bytes spread evenly over the layers (conservative for
        the GPU, since the CPU-only input layer is counted as layer weight)."""
        per_layer, rest = divmod(total_bytes, n_layer)
        layers = tuple(per_layer + (1 if i < rest else 0) for i in range(n_layer))
        return cls(layers, 0, 0, "file sizes + layer structure")


def _matmul_weight(key: str, count: int) -> MatmulWeight:
    """`"Q4_K 4096x1024"`, 2 (a summary's `matmul_weights` entry) as a MatmulWeight."""
    type_name, _, shape = key.partition(" ")
    return MatmulWeight(type_name, tuple(int(d) for d in shape.split("x")), int(count))


@dataclass(frozen=True)
class RpcDevice:
    """Another node's GPU, reached through its rpc-server (`--rpc host:port`)."""

    name: str
    """The worker's name: its plan device is `vram:<name>`."""
    vram_bytes: int
    """GPU memory rpc-server may use on that node."""
    compute_override_bytes: int | None = None
    """Its measured compute buffer, replacing the estimate."""


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
    upgrade_keeps_old_model: bool = False
    """`store.upgrade: keep`: during an upgrade the volume holds the old model and the new one."""
    n_rs_seq: int = 0
    """deepseek4 compressor-state rollback planes (speculative decoding only)."""
    cpu_variant: CpuVariant | None = None
    """The ggml CPU variant of the node (`infra.plan.repack.CPU_VARIANTS`), which decides the
    repack buffers of CPU-resident weights; None: unknown, the largest is budgeted."""
    repack: bool = True
    """False with `--no-repack`: CPU-resident weights stay in the model buffer."""
    rpc_devices: tuple[RpcDevice, ...] = ()
    """Other nodes' GPUs through rpc-server, in `--rpc` order (llama.cpp puts them first)."""
    tensor_split: tuple[float, ...] | None = None
    """`--tensor-split` over the RPC devices then the local GPU; None: proportional to each
    device's VRAM (see `rpc_tensor_split`)."""
    min_slot_context: int | None = None
    """Tokens each slot must hold (`server.minSlotContext`): advice never goes below it."""
    context_limit: int | None = None
    """Tokens a slot can serve: the model's trained context, or the YaRN-extended one
    (llama-server caps a slot there); advice never goes above it. None: unknown."""
    cpu_tensors: CpuTensors = field(default_factory=CpuTensors)
    """Tensors that tensor overrides (`-ot ...=CPU`, `--n-cpu-moe`, ...) keep in host RAM,
    whatever their layer's device (`infra.plan.extra_args`)."""
    runtime: str = "vulkan"
    """The runtime's name (`server.runtime`), as the plan's lines name it."""
    gpu_device: str = "Vulkan0"
    """The local GPU as llama-server's load log names it (`Vulkan0`, `ROCm0`): its buffers
    (`load_tensors: ROCm0 model buffer size`) are the plan's `vram`."""
    compute_estimate: Literal["vulkan", "upper-bound"] = "vulkan"
    """The runtime's compute-buffer estimate (`components.llamacpp.runtimes`): `vulkan` where
    measured, else the upper bound, which the plan states as an assumption."""


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


MEASURED_CACHE_TYPES = ("f16", "q8_0")
"""The KV cache types `vulkan_compute_bytes` was measured with on the GPU."""


def _measured_gpu_graph(inputs: LlamaCppPlanInputs) -> bool:
    """Whether `vulkan_compute_bytes` was measured for this GPU graph (else the upper bound)."""
    return (
        inputs.compute_estimate == "vulkan"
        and inputs.attention.kind == "standard"
        and inputs.flash_attn
        and inputs.cache_type_k in MEASURED_CACHE_TYPES
        and inputs.cache_type_v in MEASURED_CACHE_TYPES
    )


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


def _f32(value: float) -> float:
    # llama.cpp computes the split points in float: the same rounding decides a boundary layer.
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def rpc_tensor_split(inputs: LlamaCppPlanInputs) -> tuple[float, ...]:
    """`--tensor-split` of a split model: each device's share of the offloaded layers in
    proportion to its VRAM less its compute buffer (RPC devices first, then the local GPU),
    in GiB with one decimal, as passed to llama-server."""
    if inputs.tensor_split is not None:
        return inputs.tensor_split
    estimate = _compute_estimate(inputs)
    shares = [
        (d.vram_bytes - (d.compute_override_bytes if d.compute_override_bytes is not None
                         else estimate)) / GIB
        for d in inputs.rpc_devices
    ]  # fmt: skip
    if inputs.vram_bytes is not None:
        local = inputs.compute_override_bytes.get("vram", estimate)
        shares.append((inputs.vram_bytes - local) / GIB)
    return tuple(max(round(share, 1), 0.1) for share in shares)


def split_layers(n_layer: int, gpu_layers: int, splits: tuple[float, ...]) -> list[int | None]:
    """The device index of each layer (0..n_layer-1, then the output layer), None for the CPU:
    llama.cpp b11434's `load_tensors` (offloaded layers cut by the cumulative split points)."""
    cumulative, total = [], _f32(0.0)
    for share in splits:
        total = _f32(total + _f32(share))
        cumulative.append(total)
    points = [_f32(point / total) for point in cumulative]
    start = max(n_layer + 1 - gpu_layers, 0)
    active = min(gpu_layers, n_layer + 1) if splits else 0
    devices: list[int | None] = []
    for il in range(n_layer + 1):
        if il < start or il - start >= active:
            devices.append(None)
            continue
        where = _f32(_f32(float(il - start)) / active)
        devices.append(min(sum(1 for p in points if p <= where), len(points) - 1))
    return devices


def graph_context(inputs: LlamaCppPlanInputs) -> int:
    """The KV cells one ubatch's graph attends over: a slot's cells (`n_ctx_seq`) with `-np` > 1
    and no `--kv-unified`, so the KQ mask in the compute buffers follows the per-slot context
    (measured through Vulkan at `-c 65536 -ub 512 -np 2`: 52.1 MiB on the GPU, 40.1 MiB on the
    host, the figures of a 32768-cell graph)."""
    return kv_layout(inputs.ctx_size, inputs.parallel, inputs.kv_unified).cells


def _compute_estimate(inputs: LlamaCppPlanInputs) -> int:
    return compute_buffer_bytes(
        inputs.attention,
        graph_context(inputs),
        min(inputs.ubatch, inputs.batch),
        flash_attn=inputs.flash_attn,
    )


def device_layers(inputs: LlamaCppPlanInputs) -> dict[str, tuple[int, ...]]:
    """The repeating layers (and `n_layer` for the output layer) each device of a split model
    holds: `vram:<worker>` per RPC device, `vram` for the local GPU, `ram` for the CPU."""
    n_layer = len(inputs.weights.layer_bytes)
    names = [f"vram:{d.name}" for d in inputs.rpc_devices]
    if inputs.vram_bytes is not None:
        names.append("vram")
    split = rpc_tensor_split(inputs)
    held: dict[str, list[int]] = {name: [] for name in [*names, "ram"]}
    for il, index in enumerate(split_layers(n_layer, inputs.gpu_layers, split)):
        held["ram" if index is None else names[index]].append(il)
    return {name: tuple(layers) for name, layers in held.items()}


def _split_devices(inputs: LlamaCppPlanInputs) -> tuple[dict[str, Device], Placement]:
    weights = inputs.weights
    n_layer = len(weights.layer_bytes)
    kv = _kv_layers(inputs).total
    estimate = _compute_estimate(inputs)
    held = device_layers(inputs)

    def weight_bytes(layers: tuple[int, ...]) -> int:
        return sum(weights.output_bytes if il == n_layer else weights.layer_bytes[il]
                   for il in layers)  # fmt: skip

    def overridden(layers: tuple[int, ...]) -> int:
        """Bytes of these layers' tensors that overrides keep in host RAM."""
        return inputs.cpu_tensors.bytes_of(_wheres(layers, n_layer))

    def kv_bytes(layers: tuple[int, ...]) -> int:
        return sum(kv[il] for il in layers if il < len(kv))

    devices: dict[str, Device] = {}
    for rpc in inputs.rpc_devices:
        layers = held[f"vram:{rpc.name}"]
        compute = rpc.compute_override_bytes
        devices[f"vram:{rpc.name}"] = Device(
            rpc.vram_bytes,
            {
                "weights": weight_bytes(layers) - overridden(layers),
                "kv_cache": kv_bytes(layers),
                "compute": compute if compute is not None else (estimate if layers else 0),
            },
        )
    override = inputs.compute_override_bytes
    if inputs.vram_bytes is not None:
        layers = held["vram"]
        devices["vram"] = Device(
            inputs.vram_bytes,
            {
                "weights": weight_bytes(layers) - overridden(layers),
                "kv_cache": kv_bytes(layers),
                "compute": override.get("vram", estimate if layers else 0),
            },
        )
    cpu = held["ram"]
    gpu_held = tuple(il for name, ls in held.items() if name != "ram" for il in ls)
    packed = cpu_repack(
        inputs,
        tuple(il for il in cpu if il < n_layer),
        n_layer in cpu,
        inputs.cpu_tensors.matmul_of(_wheres(gpu_held, n_layer)),
    )
    devices["ram"] = Device(
        inputs.memory_limit_bytes,
        {
            "weights": weight_bytes(cpu)
            + overridden(gpu_held)
            + weights.input_bytes
            - packed.moved_bytes,
            "repacked_weights": packed.buffer_bytes,
            "kv_cache": kv_bytes(cpu),
            "compute": override.get("ram", estimate if cpu else 64 * MIB),
            "prompt_cache": max(inputs.cache_ram_mib, 0) * MIB,
            "runtime": inputs.runtime_bytes,
        },
    )
    _add_disk(devices, inputs)
    offloaded = tuple(il for name, ls in held.items() if name != "ram" for il in ls)
    place = Placement(
        tuple(sorted(il for il in offloaded if il < n_layer)),
        tuple(il for il in cpu if il < n_layer),
        n_layer in offloaded,
    )
    return devices, place


def cpu_repack(
    inputs: LlamaCppPlanInputs,
    cpu_layers: tuple[int, ...],
    output_on_cpu: bool,
    overridden: list[MatmulWeight] | None = None,
) -> Repack:
    """The repack buffers of the CPU-resident weights (`infra.plan.repack`).

    Without per-tensor types, or without the node's CPU, the plan cannot know which weights
    move: it budgets the upper bound, every CPU-resident layer's weights repacked at the
    largest growth (Q8_0 into AMX), unless the variant has no AMX (repacking then never grows
    a tensor, so the total is exact and only the split is unknown)."""
    if not inputs.repack:
        return Repack(0, {})
    weights = inputs.weights
    if weights.matmul_weights is None:
        if inputs.cpu_variant is not None and "AMX_INT8" not in CPU_VARIANTS[inputs.cpu_variant]:
            return Repack(0, {})
        moved = sum(weights.layer_bytes[il] for il in cpu_layers)
        moved += weights.output_bytes if output_on_cpu else 0
        amx = inputs.cpu_variant is not None and moved > 0
        return Repack(moved, {"upper bound": math.ceil(moved * MAX_GROWTH)}, moved if amx else 0)
    wheres = [str(il) for il in cpu_layers] + (["output"] if output_on_cpu else [])
    found = [w for where in wheres for w in weights.matmul_weights.get(where, ())]
    # Weights of GPU layers that overrides keep on the CPU are repacked like any CPU weight.
    found += overridden or []
    if inputs.cpu_variant is None:
        return worst_repack(found)
    return repack(found, inputs.cpu_variant)


def _wheres(layers: tuple[int, ...], n_layer: int) -> list[str]:
    """A summary's names of these layers (`"0"`, ...; the output layer `"output"`)."""
    return ["output" if il == n_layer else str(il) for il in layers]


def _add_disk(devices: dict[str, Device], inputs: LlamaCppPlanInputs) -> None:
    if inputs.disk_bytes is not None:
        files = inputs.model_file_bytes or inputs.weights.total_bytes
        reserve = int(inputs.disk_bytes * inputs.disk_headroom_fraction)
        devices["disk"] = Device(inputs.disk_bytes, {"model_files": files, "reserve": reserve})


def _llamacpp_devices(inputs: LlamaCppPlanInputs) -> tuple[dict[str, Device], Placement]:
    if inputs.rpc_devices:
        return _split_devices(inputs)
    weights = inputs.weights
    n_layer = len(weights.layer_bytes)
    has_gpu = inputs.vram_bytes is not None
    place = placement(n_layer, inputs.gpu_layers, has_gpu)
    kv = _kv_layers(inputs).total
    n_kv = len(kv)
    gpu_kv = sum(kv[il] for il in place.gpu_layers if il < n_kv)
    cpu_kv = sum(kv[il] for il in place.cpu_layers if il < n_kv)
    ubatch = min(inputs.ubatch, inputs.batch)
    estimate = compute_buffer_bytes(
        inputs.attention, graph_context(inputs), ubatch, flash_attn=inputs.flash_attn
    )
    # A CPU layer's ubatch runs on the GPU too: the largest CPU layer's KV cache is copied there.
    copied = max((kv[il] for il in place.cpu_layers if il < n_kv), default=0)
    gpu_compute = (
        vulkan_compute_bytes(inputs.attention, graph_context(inputs), ubatch, "gpu", copied)
        if _measured_gpu_graph(inputs)
        else estimate + copied
    )
    override = inputs.compute_override_bytes
    gpu_weights = sum(weights.layer_bytes[il] for il in place.gpu_layers)
    cpu_weights = sum(weights.layer_bytes[il] for il in place.cpu_layers) + weights.input_bytes
    if place.output_on_gpu:
        gpu_weights += weights.output_bytes
    else:
        cpu_weights += weights.output_bytes
    # Tensors of GPU layers that overrides keep in host RAM.
    on_gpu = _wheres(place.gpu_layers, n_layer) + (["output"] if place.output_on_gpu else [])
    overridden = inputs.cpu_tensors.bytes_of(on_gpu)
    gpu_weights -= overridden
    cpu_weights += overridden
    devices: dict[str, Device] = {}
    if has_gpu:
        devices["vram"] = Device(
            inputs.vram_bytes,
            {
                "weights": gpu_weights,
                "kv_cache": gpu_kv,
                "compute": override.get("vram", gpu_compute if place.output_on_gpu else 0),
            },
        )
    if not place.output_on_gpu:
        cpu_compute = estimate  # the CPU runs the whole graph
    elif inputs.attention.kind == "standard" and inputs.compute_estimate == "vulkan":
        # The mask and the embeddings: the CPU layers' ubatch runs on the GPU too (llama.cpp
        # offloads their large-batch ops), as measured for `-ngl 40` of 44.
        cpu_compute = vulkan_compute_bytes(inputs.attention, graph_context(inputs), ubatch, "host")
    else:
        # Not measured for other attention: the upper bound while layers stay on the CPU.
        cpu_compute = estimate if place.cpu_layers else 64 * MIB
    packed = cpu_repack(
        inputs, place.cpu_layers, not place.output_on_gpu, inputs.cpu_tensors.matmul_of(on_gpu)
    )
    devices["ram"] = Device(
        inputs.memory_limit_bytes,
        {
            "weights": cpu_weights - packed.moved_bytes,
            "repacked_weights": packed.buffer_bytes,
            "kv_cache": cpu_kv,
            "compute": override.get("ram", cpu_compute),
            "prompt_cache": max(inputs.cache_ram_mib, 0) * MIB,
            "runtime": inputs.runtime_bytes,
        },
    )
    _add_disk(devices, inputs)
    return devices, place


def _fits(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> bool:
    devices, _ = _llamacpp_devices(inputs)
    for name, device in devices.items():
        if name == "disk" or device.capacity_bytes is None:
            continue
        gpu = name.partition(":")[0] == "vram"
        if device.used_bytes + headroom_bytes * gpu > device.capacity_bytes:
            return False
    return True


def max_gpu_layers(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> int | None:
    """The highest `-ngl` whose VRAM budget fits with `headroom_bytes` spare (None: not even 0).

    Only VRAM is checked: fewer GPU layers need more host memory, which is reported apart.
    """
    best = None
    for ngl in range(len(inputs.weights.layer_bytes) + 2):
        devices, _ = _llamacpp_devices(replace(inputs, gpu_layers=ngl))
        gpus = [d for name, d in devices.items() if name.partition(":")[0] == "vram"]
        if not gpus or any(d.capacity_bytes is None for d in gpus):
            return len(inputs.weights.layer_bytes) + 1
        if all(d.used_bytes + headroom_bytes <= (d.capacity_bytes or 0) for d in gpus):
            best = ngl
    return best


def _gpus_fit(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> bool:
    devices, _ = _llamacpp_devices(inputs)
    return all(
        d.used_bytes + headroom_bytes <= d.capacity_bytes
        for name, d in devices.items()
        if name.partition(":")[0] == "vram" and d.capacity_bytes is not None
    )


def max_context(
    inputs: LlamaCppPlanInputs,
    headroom_bytes: int = 0,
    step: int = 1024,
    limit: int = 1 << 24,
    *,
    gpus_only: bool = False,
) -> int | None:
    """The largest `-c` (a multiple of `step`, never above `context_limit` per slot) that fits
    VRAM (with headroom) and host memory (`gpus_only`: VRAM alone)."""
    fits = _gpus_fit if gpus_only else _fits
    if inputs.context_limit is not None:
        limit = min(limit, inputs.context_limit * inputs.parallel)
    if limit < step * inputs.parallel or not fits(
        replace(inputs, ctx_size=step * inputs.parallel), headroom_bytes
    ):
        return None
    low, high = 1, limit // step
    while low < high:
        mid = (low + high + 1) // 2
        if fits(replace(inputs, ctx_size=mid * step), headroom_bytes):
            low = mid
        else:
            high = mid - 1
    return low * step


STACK_KEYS = {
    "gpu_layers": "server.gpuLayers",
    "ctx_size": "server.contextSize",
    "parallel": "server.parallel",
    "min_slot_context": "server.minSlotContext",
    "memory_limit_bytes": "server.resources.limits.memory",
    "cache_ram_mib": "server.cacheRam",
    "repack": "server.repack",
    "disk_bytes": "store.size",
}
"""The stack key each planner input a fix changes comes from."""


def _stack_value(name: str, value: Any) -> Any:
    if name in ("memory_limit_bytes", "disk_bytes"):
        return f"{math.ceil(value / GIB)}Gi"
    return value


def checked_fix(inputs: LlamaCppPlanInputs, text: str, **changes: Any) -> Fix | None:
    """A fix that holds: the changed stack keeps every slot at server.minSlotContext and within
    the served context, its GPUs fit, and what it needs beyond `changes` (more container
    memory, a larger volume) is part of it. None when no such completion exists."""
    after = replace(inputs, **changes)
    if after.parallel < 1 or after.ctx_size < 1:
        return None
    per_slot = after.ctx_size // after.parallel
    if after.min_slot_context is not None and per_slot < after.min_slot_context:
        return None
    if (
        after.context_limit is not None
        and kv_layout(after.ctx_size, after.parallel, after.kv_unified).cells > after.context_limit
    ):
        return None
    extra: dict[str, Any] = {}
    if "gpu_layers" not in changes and not _gpus_fit(after):
        # Another device's problem too: the fix also lowers -ngl to what the GPUs hold.
        best = max_gpu_layers(after)
        if best is None:
            return None
        extra["gpu_layers"] = best
        after = replace(after, gpu_layers=best)
    devices, _ = _llamacpp_devices(after)
    for name, device in devices.items():
        if device.fits:
            continue
        if name == "ram":
            extra["memory_limit_bytes"] = math.ceil(gib(device.used_bytes)) * GIB
        elif name == "disk":
            need = gib(device.items["model_files"]) / (1 - inputs.disk_headroom_fraction)
            extra["disk_bytes"] = math.ceil(need) * GIB
        else:
            return None
    also = [
        f"{'lower' if name == 'gpu_layers' else 'raise'} {STACK_KEYS[name]} to "
        f"{_stack_value(name, value)}"
        for name, value in extra.items()
    ]
    return Fix(
        {
            STACK_KEYS[name]: _stack_value(name, value)
            for name, value in {**changes, **extra}.items()
        },
        text + "".join(f" and {a}" for a in also),
    )


@dataclass(frozen=True)
class Suggestion:
    """The highest `-ngl`, then the largest context at it, that fit with the headroom; with
    fewer slots or more container memory where the stack's own values cannot fit."""

    gpu_layers: int | None
    ctx_size: int | None
    headroom_bytes: int
    parallel: int | None = None
    memory_limit_gib: int | None = None
    """Where the container limit must grow for the suggestion (None: it fits as set)."""
    reason: str | None = None
    """Why nothing is suggested: the constraint that decides."""
    changes: Mapping[str, Any] = field(default_factory=dict)
    """Every stack key the suggestion sets (a larger volume too, where the stack needs it)."""


def suggest(inputs: LlamaCppPlanInputs, headroom_gib: float = 4.0, step: int = 1024) -> Suggestion:
    """Highest `-ngl` and largest context (at that `-ngl`) that leave `headroom_gib` of VRAM free
    and pass the stack's checks: each slot at least server.minSlotContext and at most the served
    context; fewer slots when the stack's do not fit; the container limit raised when the host
    side needs it."""
    headroom = int(headroom_gib * GIB)
    # A model trained on fewer tokens than a step is sized in slots of what it serves.
    step = max(min(step, inputs.min_slot_context or step, inputs.context_limit or step), 1)
    floor = inputs.min_slot_context or step
    if inputs.context_limit is not None and floor > inputs.context_limit:
        return Suggestion(None, None, headroom, reason=(
            f"server.minSlotContext {floor} is more than the {inputs.context_limit} tokens a slot "
            "can serve (the model's trained context): lower server.minSlotContext, or extend "
            "the context with YaRN in server.extraArgs"
        ))  # fmt: skip
    for parallel in range(inputs.parallel, 0, -1):
        smallest = floor * parallel
        at = replace(inputs, parallel=parallel, ctx_size=max(inputs.ctx_size, smallest))
        if inputs.context_limit is not None:
            at = replace(at, ctx_size=min(at.ctx_size, inputs.context_limit * parallel))
        ngl = max_gpu_layers(at, headroom)
        if ngl is None:
            ngl = max_gpu_layers(replace(at, ctx_size=smallest), headroom)
        if ngl is None:
            continue
        ctx = max_context(replace(at, gpu_layers=ngl), headroom, step, gpus_only=True)
        if ctx is None or ctx < smallest:
            continue
        slots = {"parallel": parallel} if parallel != inputs.parallel else {}
        fix = checked_fix(inputs, "suggest", gpu_layers=ngl, ctx_size=ctx, **slots)
        if fix is None:
            continue
        limit = fix.changes.get("server.resources.limits.memory")
        return Suggestion(
            ngl,
            ctx,
            headroom,
            parallel if parallel != inputs.parallel else None,
            int(limit.removesuffix("Gi")) if isinstance(limit, str) else None,
            changes=fix.changes,
        )
    return Suggestion(None, None, headroom, reason=(
        f"not even one slot of server.minSlotContext {floor} fits with {fmt_num(headroom_gib)} "
        "GiB of VRAM kept free at any server.gpuLayers: lower server.minSlotContext, use a "
        "smaller quant, or a larger GPU (memory.vramGib)"
    ))  # fmt: skip


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
    held = device_layers(inputs) if inputs.rpc_devices else {}
    output = (n_layer,)
    on_device = held or {
        "vram": place.gpu_layers + (output if place.output_on_gpu else ()),
        "ram": place.cpu_layers + (() if place.output_on_gpu else output),
    }
    devices = {
        name: replace(device, layers=_held_text(on_device[name], n_layer))
        if name in on_device
        else device
        for name, device in devices.items()
    }
    vram, ram = devices.get("vram"), devices["ram"]
    transfers: dict[str, int] = {}
    problems: list[str] = []
    for index, rpc in enumerate(inputs.rpc_devices):
        device_name = f"vram:{rpc.name}"
        device = devices[device_name]
        what = _held_text(held[device_name], n_layer)
        where = f"VRAM {rpc.name} (rpc)"
        rows += [
            TableRow(f"weights ({what})", device.items["weights"], where),
            TableRow(f"{kv_what}, its layers", device.items["kv_cache"], where),
            TableRow("compute buffers", device.items["compute"], where),
        ]
        transfers[rpc.name] = device.items["weights"]
        if not device.fits:
            problems.append(_rpc_refusal(inputs, index, rpc, device, what, device_name))
    if vram is not None:
        if held:
            gpu_text = _held_text(held["vram"], n_layer)
        rows += [
            TableRow(f"weights ({gpu_text})", vram.items["weights"], "VRAM"),
            TableRow(kv_what, vram.items["kv_cache"], "VRAM"),
            TableRow("compute buffers", vram.items["compute"], "VRAM"),
        ]
    rows += [
        TableRow(f"weights ({cpu_text} + token_embd)", ram.items["weights"], "RAM (container)"),
        TableRow(_repack_text(inputs), ram.items["repacked_weights"], "RAM (container)"),
        TableRow("KV cache (CPU layers)", ram.items["kv_cache"], "RAM (container)"),
        TableRow("compute buffers (CPU)", ram.items["compute"], "RAM (container)"),
        TableRow(f"prompt cache (--cache-ram {inputs.cache_ram_mib})", ram.items["prompt_cache"],
                 "RAM (container)"),
        TableRow("runtime", ram.items["runtime"], "RAM (container)"),
    ]  # fmt: skip
    if "disk" in devices:
        rows.append(TableRow("model files", devices["disk"].items["model_files"], "model volume"))
    rows += [
        TableRow(f"weights sent to {name} at load", size, "network (rpc)")
        for name, size in transfers.items()
    ]
    notes = _notes(inputs)
    if inputs.rpc_devices:
        split = ",".join(f"{share:g}" for share in rpc_tensor_split(inputs))
        notes.append(
            f"split over {len(inputs.rpc_devices)} rpc-server worker(s) and "
            f"{'the local GPU' if inputs.vram_bytes is not None else 'no local GPU'}: "
            f"--tensor-split {split} (RPC devices first, as llama.cpp orders them)"
        )
    advice: list[str] = []
    fixes: list[Fix] = []
    on_gpu = _wheres(place.gpu_layers, n_layer) + (["output"] if place.output_on_gpu else [])
    packed = cpu_repack(
        inputs, place.cpu_layers, not place.output_on_gpu, inputs.cpu_tensors.matmul_of(on_gpu)
    )
    if packed.amx_quantized_bytes and inputs.cpu_variant is not None:
        fix = checked_fix(inputs, "set server.repack: false", repack=False)
        fixes += [fix] if fix else []
        problems.append(
            f"plan: the node's CPU ({inputs.cpu_variant}, memory.nodeCpu) would put "
            f"{fmt_size(packed.amx_quantized_bytes)} of quantized CPU-resident weights into AMX "
            "buffers, and llama.cpp b11434 dies on them in its warm-up run (SIGILL: the AMX "
            "tile configuration is miscompiled, ggml-org/llama.cpp#26954): set server.repack: "
            "false (--no-repack), or offload every layer (server.gpuLayers)"
        )
    if vram is not None and not vram.fits:
        text, found = _vram_refusal(inputs, vram, gpu_text)
        problems.append(text)
        fixes += found
    if not ram.fits:
        text, found = _ram_refusal(inputs, ram, cpu_text)
        problems.append(text)
        fixes += found
    disk = devices.get("disk")
    if disk is not None and not disk.fits:
        need = math.ceil(gib(disk.items["model_files"]) / (1 - inputs.disk_headroom_fraction))
        fix = checked_fix(inputs, f"raise store.size to at least {need}Gi", disk_bytes=need * GIB)
        fixes += [fix] if fix else []
        problems.append(
            f"plan: does not fit on the model volume: {fmt_size(disk.used_bytes)} needed of "
            f"{fmt_size(disk.capacity_bytes or 0)} "
            f"(model files {fmt_size(disk.items['model_files'])}, "
            f"reserve {fmt_size(disk.items['reserve'])}): "
            + (fix.text if fix else f"raise store.size to at least {need}Gi")
        )
    if disk is not None and disk.fits and inputs.upgrade_keeps_old_model:
        advice += _two_models_advice(inputs, disk)
    if vram is not None and vram.fits and place.cpu_layers:
        best = max_gpu_layers(inputs)
        fix = None
        if best is not None and best > inputs.gpu_layers:
            fix = checked_fix(inputs, f"set server.gpuLayers to {best}", gpu_layers=best)
        if fix is not None:
            fixes.append(fix)
            advice.append(
                f"server.gpuLayers {inputs.gpu_layers} fits with "
                f"{fmt_size((vram.capacity_bytes or 0) - vram.used_bytes)} VRAM free; up to {best} "
                "would still fit (with no headroom)"
            )
    assumptions = _assumptions(inputs, devices)
    return Plan(
        devices, advice, problems, rows, notes, weights.source, transfers, assumptions, fixes
    )


def _assumptions(inputs: LlamaCppPlanInputs, devices: dict[str, Device]) -> list[str]:
    """Each value taken from a default instead of the header or the stack, with what rests on
    it: the model's structure keys (`AttentionShape.assumed`) and weights without a header."""
    memory = {name: d for name, d in devices.items() if name != "disk"}
    total = sum(d.used_bytes for d in memory.values())
    kv = sum(d.items.get("kv_cache", 0) for d in memory.values())
    compute = sum(d.items.get("compute", 0) for d in memory.values())
    shape = inputs.attention
    lines = []
    for key, value in shape.assumed:
        lacking = f"{key}: not in the GGUF header or model.metadata, {value} assumed"
        suffix = key.rpartition(".")[2]
        if key.endswith("attention.head_count_kv"):
            lines.append(
                f"{lacking} (= head_count: no grouped-query attention, the largest KV cache); "
                f"the KV cache's {fmt_size(kv)} of the {fmt_size(total)} planned rests on it, "
                f"{fmt_size(kv / max(value, 1))} per KV head (lock the model, or set the key in "
                "model.metadata)"
            )
        elif suffix == "vocab_size":
            lines.append(
                f"{key}: unknown until the model is locked (the tokenizer's size is in the "
                f"header), so the compute buffers' {fmt_size(compute)} of the {fmt_size(total)} "
                "planned leave the logits out where they are an estimate"
            )
        elif suffix in ("key_length", "value_length"):
            lines.append(
                f"{lacking} (embedding_length / head_count); the KV cache's {fmt_size(kv)} of "
                f"the {fmt_size(total)} planned grows with it (lock the model, or set the key)"
            )
        else:
            lines.append(
                f"{lacking}; the compute buffers' {fmt_size(compute)} of the {fmt_size(total)} "
                "planned are estimated with it (lock the model, or set the key)"
            )
    if inputs.context_limit is None:
        lines.append(
            "the model's context_length: not in the GGUF header or model.metadata, so "
            "server.contextSize is not checked against the context the model serves (lock the "
            "model)"
        )
    gpu_compute = memory["vram"].items["compute"] if "vram" in memory else 0
    if (
        inputs.compute_estimate != "vulkan"
        and gpu_compute
        and "vram" not in (inputs.compute_override_bytes)
    ):
        lines.append(
            f"compute buffers: no measured estimate for the runtime {inputs.runtime!r} (measured "
            f"through Vulkan only), so its GPU's {fmt_size(gpu_compute)} is the upper bound (one "
            "ubatch's whole graph), not a measured figure (set memory.computeGib from a real "
            f"load's `sched_reserve: {inputs.gpu_device} compute buffer size` line)"
        )
    if inputs.weights.source == "file sizes + layer structure":
        n_layer = len(inputs.weights.layer_bytes)
        lines.append(
            f"weights: {fmt_size(inputs.weights.total_bytes)} spread evenly over {n_layer} layers "
            "(no GGUF header yet): which bytes land in VRAM and which in RAM is approximate until "
            "the model is locked"
        )
    return lines


def _repack_text(inputs: LlamaCppPlanInputs) -> str:
    """What the repack row holds: the node's variant, or why it is an upper bound."""
    if inputs.cpu_variant is None:
        return "repacked weights (node CPU unknown: the largest, AMX, budgeted)"
    if inputs.weights.matmul_weights is None:
        return f"repacked weights ({inputs.cpu_variant}: which ones is known once locked)"
    return f"repacked weights (CPU_REPACK/AMX, ggml CPU variant {inputs.cpu_variant})"


def _held_text(layers: tuple[int, ...], n_layer: int) -> str:
    """`layers 21-42 + output` for a device's share of a split model."""
    repeating = [il for il in layers if il < n_layer]
    out = " + output" if n_layer in layers else ""
    if not repeating:
        return f"no layers{out}"
    first, last = repeating[0], repeating[-1]
    span = f"layer {first}" if first == last else f"layers {first}-{last}"
    return f"{span}{out}"


def _rpc_refusal(
    inputs: LlamaCppPlanInputs, index: int, rpc: RpcDevice, device: Device, what: str, name: str
) -> str:
    items = device.items
    split = ",".join(f"{share:g}" for share in rpc_tensor_split(inputs))
    return (
        f"plan: does not fit in the VRAM of rpc worker {rpc.name} ({name}): "
        f"{fmt_size(device.used_bytes)} needed of {fmt_num(gib(rpc.vram_bytes))} GiB "
        f"(weights {fmt_size(items['weights'])} for {what}, KV cache "
        f"{fmt_size(items['kv_cache'])}, compute {fmt_size(items['compute'])}; "
        f"--tensor-split {split}): set server.rpc.workers[{index}].vramGib to what the node "
        "really has, add a worker, or lower server.contextSize"
    )


def _two_models_advice(inputs: LlamaCppPlanInputs, disk: Device) -> list[str]:
    """What an upgrade needs when the old model serves until the new one is verified."""
    files, reserve = disk.items["model_files"], disk.items["reserve"]
    both = 2 * files + reserve
    capacity = disk.capacity_bytes or 0
    if both <= capacity:
        return []
    need = math.ceil(gib(2 * files) / (1 - inputs.disk_headroom_fraction))
    return [
        f"store.upgrade: keep holds the old and the new model during an upgrade, but the volume "
        f"cannot: {fmt_size(both)} needed (2 x model files {fmt_size(files)}, reserve "
        f"{fmt_size(reserve)}) of {fmt_size(capacity)}; raise store.size to at least {need}Gi, "
        "or set store.upgrade: replace to accept the downtime (the old files go first)"
    ]


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
            f"deepseek4 KV cache {fmt_size(kv.cache_bytes + kv.state_bytes)} (compressor state "
            f"{fmt_size(kv.state_bytes)} included): K-only, a {shape.sliding_window}-token window "
            "and 4x/128x compressed layers, not the 576-elements/token/layer MLA of DeepSeek "
            "V2/V3 that seed 000 assumed (~1.6 GiB at 64k q8_0, 1 slot)"
        )
    n_layer = len(inputs.weights.layer_bytes)
    if inputs.runtime != "vulkan" and inputs.vram_bytes is not None:
        notes.append(
            f"runtime {inputs.runtime}: llama-server's GPU is {inputs.gpu_device} (its "
            "`load_tensors` and `sched_reserve` buffers are the plan's vram)"
        )
    if 0 < inputs.gpu_layers <= n_layer:
        notes.append(
            f"-ngl {inputs.gpu_layers} puts the output layer and {inputs.gpu_layers - 1} "
            f"repeating layers on the GPU (llama.cpp offloads the output layer first); "
            f"-ngl {n_layer + 1} offloads all {n_layer} layers"
        )
    return notes


def context_fixes(inputs: LlamaCppPlanInputs, ctx: int | None) -> list[Fix]:
    """Fixes on the context that fits (`ctx`, None: none) that the stack's own checks accept:
    never a context below server.minSlotContext per slot; fewer slots when that helps."""
    if ctx is None or ctx < 256:
        return []
    floor = inputs.min_slot_context
    if floor is None or ctx >= floor * inputs.parallel:
        fix = checked_fix(inputs, f"lower server.contextSize to at most {ctx}", ctx_size=ctx)
        return [fix] if fix else []
    slots = ctx // floor
    if slots >= 1:
        fix = checked_fix(
            inputs,
            f"lower server.parallel to {slots} and server.contextSize to {slots * floor} "
            f"({inputs.parallel} slots of server.minSlotContext {floor} need "
            f"{floor * inputs.parallel}; at most {ctx} fits)",
            parallel=slots,
            ctx_size=slots * floor,
        )
        return [fix] if fix else []
    return []


def context_advice(inputs: LlamaCppPlanInputs, ctx: int | None) -> list[str]:
    """The texts of `context_fixes`, or why none holds when server.minSlotContext decides."""
    fixes = context_fixes(inputs, ctx)
    if fixes or ctx is None or ctx < 256:
        return [fix.text for fix in fixes]
    floor = inputs.min_slot_context
    return [
        f"at most {ctx} tokens of context fit, less than one slot of server.minSlotContext "
        f"{floor}: server.minSlotContext decides (lower it, and server.contextSize, to fit)"
    ]


def _vram_refusal(inputs: LlamaCppPlanInputs, vram: Device, gpu_text: str) -> tuple[str, list[Fix]]:
    cap = vram.capacity_bytes or 0
    items = vram.items
    detail = (
        f"weights {fmt_size(items['weights'])} for {gpu_text}, "
        f"KV cache {fmt_size(items['kv_cache'])}, compute {fmt_size(items['compute'])}"
    )
    fixes: list[Fix] = []
    best = max_gpu_layers(inputs)
    if best is not None:
        fix = checked_fix(inputs, f"set server.gpuLayers to at most {best}", gpu_layers=best)
        fixes += [fix] if fix else []
    ctx = max_context(inputs, gpus_only=True)
    fixes += context_fixes(inputs, ctx)
    texts = [fix.text for fix in fixes] or context_advice(inputs, ctx)
    if not texts:
        texts.append("the model does not fit this GPU at any server.gpuLayers")
    return (
        f"plan: does not fit in VRAM: {fmt_size(vram.used_bytes)} needed of "
        f"{fmt_num(gib(cap))} GiB ({detail}): {' or '.join(texts)}"
    ), fixes


def _ram_refusal(inputs: LlamaCppPlanInputs, ram: Device, cpu_text: str) -> tuple[str, list[Fix]]:
    cap = ram.capacity_bytes or 0
    items = ram.items
    detail = (
        f"weights {fmt_size(items['weights'])} for {cpu_text} + token_embd, "
        f"KV cache {fmt_size(items['kv_cache'])}, compute {fmt_size(items['compute'])}, "
        f"prompt cache {fmt_size(items['prompt_cache'])} (--cache-ram {inputs.cache_ram_mib}), "
        f"runtime {fmt_size(items['runtime'])}"
    )
    need_gi = math.ceil(gib(ram.used_bytes))
    found = [
        checked_fix(
            inputs,
            f"raise server.resources.limits.memory to at least {need_gi}Gi",
            memory_limit_bytes=need_gi * GIB,
        )
    ]
    over = ram.used_bytes - cap
    if items["prompt_cache"] >= over:
        mib = (items["prompt_cache"] - over) // MIB
        found.append(
            checked_fix(inputs, f"set server.cacheRam to at most {mib} MiB", cache_ram_mib=mib)
        )
    fixes = [fix for fix in found if fix is not None]
    texts = [fix.text for fix in fixes]
    return (
        f"plan: does not fit in the container memory limit: {fmt_size(ram.used_bytes)} needed of "
        f"{fmt_num(gib(cap))} GiB ({detail}): {' or '.join(texts)}"
    ), fixes
