"""The speed estimate of a llama-server plan: each layer's active bytes, parameters and KV
cache on the device `-ngl` puts it on."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from infra.devices import DeviceFigures
from infra.plan.deepseek4 import kv_layout
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs
from infra.plan.llamacpp_placement import kv_layers, placement
from infra.plan.speed import SpeedEstimate, SpeedInputs, Work, active_share, estimate


def expert_layers(inputs: LlamaCppPlanInputs, share: float | None) -> list[bool]:
    """Per repeating layer: whether it holds experts (3-D tensors in the header's table;
    without the table, every layer of a mixture of experts)."""
    matmul = inputs.weights.matmul_weights
    n_layer = len(inputs.weights.layer_bytes)
    if matmul is None:
        return [share is not None] * n_layer
    return [any(len(t.dims) == 3 for t in matmul.get(str(il), ())) for il in range(n_layer)]


def layer_work(
    inputs: LlamaCppPlanInputs, share: float | None
) -> tuple[list[tuple[float, float]], tuple[float, float], bool]:
    """Per repeating layer and for the output layer: (active bytes, active parameters), and
    whether the parameters are known (a header's per-tensor shapes)."""
    weights = inputs.weights
    matmul = weights.matmul_weights
    n_layer = len(weights.layer_bytes)

    def work(where: str, total_bytes: int) -> tuple[float, float]:
        if matmul is None:
            return total_bytes * (share or 1.0), 0.0
        params = 0.0
        skipped = 0.0
        for tensor in matmul.get(where, ()):
            elements = float(math.prod(tensor.dims)) * tensor.count
            if len(tensor.dims) == 3 and share is not None:
                params += elements * share
                skipped += tensor.nbytes * (1 - share)
            else:
                params += elements
        return total_bytes - skipped, params

    layers = [work(str(il), weights.layer_bytes[il]) for il in range(n_layer)]
    return layers, work("output", weights.output_bytes), matmul is not None


def llamacpp_speed(
    inputs: LlamaCppPlanInputs,
    metadata: Mapping[str, Any],
    architecture: str,
    device: DeviceFigures,
    host: DeviceFigures | None,
    threads: int | None,
) -> SpeedEstimate | str:
    """The estimate, or why there is none."""
    found = llamacpp_speed_inputs(inputs, metadata, architecture, device, host, threads)
    if isinstance(found, str):
        return found
    return estimate(*found)


def llamacpp_speed_inputs(
    inputs: LlamaCppPlanInputs,
    metadata: Mapping[str, Any],
    architecture: str,
    device: DeviceFigures,
    host: DeviceFigures | None,
    threads: int | None,
) -> tuple[SpeedInputs, tuple[str, ...]] | str:
    """The estimate's inputs and its notes, or why there is none."""
    if inputs.rpc_devices:
        return "not estimated for a model split over RPC workers (the network is not modelled)"
    if inputs.cpu_tensors.bytes_of(["output", *map(str, range(len(inputs.weights.layer_bytes)))]):
        return "not estimated with tensor overrides that keep tensors on the CPU"
    share = active_share(metadata, architecture)
    layers, output, known = layer_work(inputs, share)
    n_layer = len(layers)
    gpu = inputs.vram_bytes is not None and device.kind == "gpu"
    place = placement(n_layer, inputs.gpu_layers, gpu)
    layout = kv_layout(inputs.ctx_size, inputs.parallel, inputs.kv_unified)
    per_layer_kv = kv_layers(inputs).total
    # Elements rather than bytes: the cache at 4 bytes an element, whatever its type.
    per_layer_elements = [
        b / 4 for b in kv_layers(replace(inputs, cache_type_k="f32", cache_type_v="f32")).total
    ]
    experts = expert_layers(inputs, share)
    cells = layout.cells * layout.streams
    shape = inputs.attention
    per_entry = 2.0 * shape.n_head * (shape.head_k + shape.head_v)

    def attention(il: int) -> float:
        """FLOPs per token of context of a layer's attention: deepseek4's compressed layers
        attend over one entry per `ratio` tokens, its uncompressed ones over the window only."""
        if il < len(shape.compress_ratios):
            ratio = shape.compress_ratios[il]
            return per_entry / ratio if ratio > 0 else 0.0
        return per_entry

    def side(indices: tuple[int, ...], with_output: bool) -> Work:
        active = [layers[il] for il in indices] + ([output] if with_output else [])
        return Work(
            weight_bytes=sum(b for b, _ in active),
            params=sum(p for _, p in active),
            kv_bytes_per_cell=sum(per_layer_kv[il] for il in indices if il < len(per_layer_kv))
            / max(cells, 1),
            layers=len(indices),
            attention_flops_per_cell=sum(attention(il) for il in indices),
            kv_elements_per_cell=sum(
                per_layer_elements[il] for il in indices if il < len(per_layer_elements)
            )
            / max(cells, 1),
            moe_layers=sum(experts[il] for il in indices),
        )

    if gpu:
        on_device = side(place.gpu_layers, place.output_on_gpu)
        on_host = side(place.cpu_layers, not place.output_on_gpu)
        backend = inputs.gpu_device.rstrip("0123456789").lower()
        cpu = host
    else:
        # Everything on a CPU: the named device's host (or the device itself, a CPU entry).
        on_device = side(tuple(range(n_layer)), True)
        on_host = Work()
        backend = "cpu"
        device = host if device.kind == "gpu" and host is not None else device
        cpu = None
    notes: list[str] = []
    if share is not None and not known:
        notes.append(
            f"a mixture of experts without per-tensor sizes (no GGUF header): "
            f"{share:.3g} (expert_used_count / expert_count) of every layer's bytes counted, "
            "an upper bound on the speed until the model is locked"
        )
    elif share is None and not known and f"{architecture}.expert_used_count" in metadata:
        notes.append(
            "a mixture of experts whose expert_count is unknown (no GGUF header): every "
            "expert's bytes counted, a lower bound on the speed until the model is locked"
        )
    if inputs.speculative is not None:
        notes.append(f"speculative decoding ({inputs.speculative}) not counted")
    speed = SpeedInputs(
        device=device,
        host=cpu,
        on_device=on_device,
        on_host=on_host,
        backend=backend,
        threads=threads,
        slot_context=layout.cells,
        prefill_known=known,
    )
    return speed, tuple(notes)
