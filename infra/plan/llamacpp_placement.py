"""Where llama-server b11434 puts each layer (-ngl, RPC split, repack), what each device holds."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace

from infra.cpus import CPU_VARIANTS
from infra.plan.deepseek4 import KvLayers, kv_cache_layers
from infra.plan.llamacpp_compute import (
    compute_estimate,
    graph_context,
    measured_gpu_graph,
    vulkan_compute_bytes,
)
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs
from infra.plan.repack import MAX_GROWTH, MatmulWeight, Repack, repack, worst_repack
from infra.plan.report import (
    GIB,
    MIB,
    Device,
)


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
    estimate = compute_estimate(inputs)
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
    kv = kv_layers(inputs).total
    estimate = compute_estimate(inputs)
    held = device_layers(inputs)

    def weight_bytes(layers: tuple[int, ...]) -> int:
        return sum(weights.output_bytes + weights.tied_output_bytes if il == n_layer
                   else weights.layer_bytes[il] for il in layers)  # fmt: skip

    def overridden(layers: tuple[int, ...]) -> int:
        """Bytes of these layers' tensors that overrides keep in host RAM."""
        return inputs.cpu_tensors.bytes_of(layer_wheres(layers, n_layer))

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
                **_draft_item(inputs),
            },
        )
    cpu = held["ram"]
    gpu_held = tuple(il for name, ls in held.items() if name != "ram" for il in ls)
    packed = cpu_repack(
        inputs,
        tuple(il for il in cpu if il < n_layer),
        n_layer in cpu,
        inputs.cpu_tensors.matmul_of(layer_wheres(gpu_held, n_layer)),
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
            **({} if inputs.vram_bytes is not None else _draft_item(inputs)),
        },
    )
    _add_node(devices, inputs)
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


def layer_wheres(layers: tuple[int, ...], n_layer: int) -> list[str]:
    """A summary's names of these layers (`"0"`, ...; the output layer `"output"`)."""
    return ["output" if il == n_layer else str(il) for il in layers]


def _add_node(devices: dict[str, Device], inputs: LlamaCppPlanInputs) -> None:
    """The node's RAM (`memory.node`): the container's host-side buffers, and on unified
    memory the GPU's buffers beyond its carve-out."""
    if inputs.node_ram_bytes is None:
        return
    items = {"host_buffers": devices["ram"].used_bytes}
    if inputs.carve_out_bytes is not None:
        gpu = sum(d.used_bytes for name, d in devices.items() if name == "vram")
        items["gpu_beyond_carve_out"] = max(gpu - inputs.carve_out_bytes, 0)
    devices["node"] = Device(inputs.node_ram_bytes, items)


def _add_disk(devices: dict[str, Device], inputs: LlamaCppPlanInputs) -> None:
    if inputs.disk_bytes is not None:
        files = inputs.model_file_bytes or inputs.weights.total_bytes
        files += inputs.draft.file_bytes if inputs.draft is not None else 0
        reserve = int(inputs.disk_bytes * inputs.disk_headroom_fraction)
        devices["disk"] = Device(inputs.disk_bytes, {"model_files": files, "reserve": reserve})


def llamacpp_devices(inputs: LlamaCppPlanInputs) -> tuple[dict[str, Device], Placement]:
    """What each device (GPUs, RAM, disk) holds at the plan's settings, and the placement."""
    if inputs.rpc_devices:
        return _split_devices(inputs)
    weights = inputs.weights
    n_layer = len(weights.layer_bytes)
    has_gpu = inputs.vram_bytes is not None
    place = placement(n_layer, inputs.gpu_layers, has_gpu)
    kv = kv_layers(inputs).total
    n_kv = len(kv)
    gpu_kv = sum(kv[il] for il in place.gpu_layers if il < n_kv)
    cpu_kv = sum(kv[il] for il in place.cpu_layers if il < n_kv)
    ubatch = min(inputs.ubatch, inputs.batch)
    estimate = compute_estimate(inputs)  # measured for a CPU runtime, else the upper bound
    # A CPU layer's ubatch runs on the GPU too: the largest CPU layer's KV cache is copied there.
    copied = max((kv[il] for il in place.cpu_layers if il < n_kv), default=0)
    gpu_compute = (
        vulkan_compute_bytes(inputs.attention, graph_context(inputs), ubatch, "gpu", copied)
        if measured_gpu_graph(inputs)
        else estimate + copied
    )
    override = inputs.compute_override_bytes
    gpu_weights = sum(weights.layer_bytes[il] for il in place.gpu_layers)
    cpu_weights = sum(weights.layer_bytes[il] for il in place.cpu_layers) + weights.input_bytes
    if place.output_on_gpu:
        gpu_weights += weights.output_bytes + weights.tied_output_bytes
    else:
        cpu_weights += weights.output_bytes
    # Tensors of GPU layers that overrides keep in host RAM.
    on_gpu = layer_wheres(place.gpu_layers, n_layer) + (["output"] if place.output_on_gpu else [])
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
                **_draft_item(inputs),
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
            **({} if has_gpu else _draft_item(inputs)),
        },
    )
    _add_node(devices, inputs)
    _add_disk(devices, inputs)
    return devices, place


def _draft_item(inputs: LlamaCppPlanInputs) -> dict[str, int]:
    """The speculative draft's bytes on the device that holds it (the GPU; the host without
    one), as one item."""
    return {} if inputs.draft is None else {"draft": inputs.draft.device_bytes}


def _fits(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> bool:
    devices, _ = llamacpp_devices(inputs)
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
        devices, _ = llamacpp_devices(replace(inputs, gpu_layers=ngl))
        gpus = [d for name, d in devices.items() if name.partition(":")[0] == "vram"]
        if not gpus or any(d.capacity_bytes is None for d in gpus):
            return len(inputs.weights.layer_bytes) + 1
        if all(d.used_bytes + headroom_bytes <= (d.capacity_bytes or 0) for d in gpus):
            best = ngl
    return best


def gpus_fit(inputs: LlamaCppPlanInputs, headroom_bytes: int = 0) -> bool:
    """Whether every GPU (local and RPC) fits with `headroom_bytes` free."""
    devices, _ = llamacpp_devices(inputs)
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
    fits = gpus_fit if gpus_only else _fits
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


def kv_layers(inputs: LlamaCppPlanInputs) -> KvLayers:
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
