"""The llama-server memory and disk plan: weights, placement, KV cache, compute buffers.

Pure functions over plain inputs. A llama.cpp plan places the weights, KV cache and compute
buffers the way llama-server b11434 does:

- `-ngl N` offloads the output layer first, then the last N-1 repeating layers
  (`i_gpu_start = n_layer + 1 - N`); `token_embd` always stays on the CPU. So `-ngl 43` of a
  43-layer model still keeps layer 0 on the CPU; `-ngl 44` offloads everything.
- The KV cache of a layer lives on that layer's device (`--kv-offload`, the default); its cells,
  streams and bytes are `infra.plan.deepseek4`'s.
- Host memory in the container: CPU-resident weights and KV, the CPU compute buffer, the
  prompt cache (`--cache-ram`, default `DEFAULT_CACHE_RAM_MIB`) and a runtime allowance.

Compute buffers are estimates, overridable per device: `vulkan_compute_bytes` for llama-style
attention (measured on a Vulkan GPU: the host's buffer whenever layers are offloaded, the GPU's
over an F16 KV cache), `cpu_compute_bytes` for a CPU runtime's (flash attention), else the upper
bound `compute_buffer_bytes`. A runtime of another GPU backend (ROCm) was not measured: it takes
the upper bound, and the plan says so as an assumption.
"""

from __future__ import annotations

import math
from dataclasses import replace

from infra.plan.architectures import architecture_assumptions, architecture_notes
from infra.plan.deepseek4 import kv_layout
from infra.plan.llamacpp_advice import (
    STACK_KEYS,
    Suggestion,
    checked_fix,
    context_advice,
    context_fixes,
    suggest,
    vram_refusal,
)
from infra.plan.llamacpp_compute import (
    MEASURED_CACHE_TYPES,
    VULKAN_SLACK_BYTES,
    compute_buffer_bytes,
    cpu_compute_assumptions,
    graph_context,
    vulkan_compute_bytes,
)
from infra.plan.llamacpp_host_advice import node_refusals, ram_refusal, two_models_advice
from infra.plan.llamacpp_inputs import (
    DEFAULT_CACHE_RAM_MIB,
    LlamaCppPlanInputs,
    ModelWeights,
    RpcDevice,
    WeightSource,
    draft_text,
    speculation_assumptions,
)
from infra.plan.llamacpp_placement import (
    Placement,
    cpu_repack,
    device_layers,
    kv_layers,
    layer_wheres,
    llamacpp_devices,
    max_context,
    max_gpu_layers,
    placement,
    rpc_tensor_split,
    split_layers,
)
from infra.plan.report import (
    GIB,
    Device,
    Fix,
    Plan,
    TableRow,
    fmt_num,
    fmt_size,
    gib,
)

__all__ = [
    "DEFAULT_CACHE_RAM_MIB",
    "MEASURED_CACHE_TYPES",
    "STACK_KEYS",
    "VULKAN_SLACK_BYTES",
    "LlamaCppPlanInputs",
    "ModelWeights",
    "Placement",
    "RpcDevice",
    "Suggestion",
    "WeightSource",
    "checked_fix",
    "compute_buffer_bytes",
    "context_advice",
    "context_fixes",
    "cpu_repack",
    "device_layers",
    "graph_context",
    "max_context",
    "max_gpu_layers",
    "placement",
    "plan_llamacpp",
    "rpc_tensor_split",
    "split_layers",
    "suggest",
    "vulkan_compute_bytes",
]


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
    devices, place = llamacpp_devices(inputs)
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
    for name, device in devices.items():
        if "draft" in device.items:
            where = "VRAM" if name == "vram" else "RAM (container)"
            rows.append(TableRow(draft_text(inputs.draft), device.items["draft"], where))
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
    on_gpu = layer_wheres(place.gpu_layers, n_layer) + (["output"] if place.output_on_gpu else [])
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
        text, found = vram_refusal(inputs, vram, gpu_text)
        problems.append(text)
        fixes += found
    if not ram.fits:
        text, found = ram_refusal(inputs, ram, cpu_text)
        problems.append(text)
        fixes += found
    node = devices.get("node")
    if node is not None:
        texts, found = node_refusals(inputs, node)
        problems += texts
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
            + (fix.text if fix else f"raise store.size to at least {need}Gi ({ALONE})")
        )
    if disk is not None and disk.fits and inputs.upgrade_keeps_old_model:
        advice += two_models_advice(inputs, disk)
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
    # The split the plan placed the layers by: the server's --tensor-split is this one.
    tensor_split = rpc_tensor_split(inputs) if inputs.rpc_devices else None
    return Plan(
        devices, advice, problems, rows, notes, weights.source, transfers, assumptions, fixes,
        tensor_split=tensor_split,
    )  # fmt: skip


ALONE = "not enough alone: the memory refusals above say what decides whether the model runs"


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
    lines += architecture_assumptions(inputs, total, kv)
    lines += speculation_assumptions(inputs, fmt_size(total))
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
    lines += cpu_compute_assumptions(inputs, memory["ram"].items["compute"])
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


def _notes(inputs: LlamaCppPlanInputs) -> list[str]:
    notes = []
    shape = inputs.attention
    if shape.kind == "deepseek4":
        kv = kv_layers(inputs)
        notes.append(
            f"deepseek4 KV cache {fmt_size(kv.cache_bytes + kv.state_bytes)} (compressor state "
            f"{fmt_size(kv.state_bytes)} included): K-only, a {shape.sliding_window}-token window "
            "and 4x/128x compressed layers, not the 576-elements/token/layer MLA of DeepSeek "
            "V2/V3 that seed 000 assumed (~1.6 GiB at 64k q8_0, 1 slot)"
        )
    notes += architecture_notes(inputs)
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
