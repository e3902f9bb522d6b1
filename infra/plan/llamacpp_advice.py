"""The llama.cpp plan's advice: fixes that hold (checked against the whole plan) and suggestions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from infra.plan.deepseek4 import (
    kv_layout,
)
from infra.plan.extra_args import n_cpu_moe_tensors
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs
from infra.plan.llamacpp_placement import gpus_fit, llamacpp_devices, max_context, max_gpu_layers
from infra.plan.report import (
    GIB,
    Device,
    Fix,
    fmt_num,
    fmt_size,
    gib,
)

STACK_KEYS = {
    "gpu_layers": "server.gpuLayers",
    "ctx_size": "server.contextSize",
    "parallel": "server.parallel",
    "min_slot_context": "server.minSlotContext",
    "memory_limit_bytes": "server.resources.limits.memory",
    "cache_ram_mib": "server.cacheRam",
    "repack": "server.repack",
    "disk_bytes": "store.size",
    "cache_type_k": "server.cacheTypeK",
    "cache_type_v": "server.cacheTypeV",
    "extra_args": "server.extraArgs",
}
"""The stack key each planner input a fix changes comes from."""


def _stack_value(name: str, value: Any) -> Any:
    if name in ("memory_limit_bytes", "disk_bytes"):
        return f"{math.ceil(value / GIB)}Gi"
    if name == "extra_args":
        return list(value)
    return value


def _verb(inputs: LlamaCppPlanInputs, name: str, value: Any) -> str:
    now = getattr(inputs, name)
    return "lower" if now is not None and value < now else "raise"


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
    if "gpu_layers" not in changes and not gpus_fit(after):
        # Another device's problem too: the fix also lowers -ngl to what the GPUs hold.
        best = max_gpu_layers(after)
        if best is None:
            return None
        extra["gpu_layers"] = best
        after = replace(after, gpu_layers=best)
    devices, _ = llamacpp_devices(after)
    for name, device in devices.items():
        if device.fits:
            continue
        if name == "ram":
            extra["memory_limit_bytes"] = math.ceil(gib(device.used_bytes)) * GIB
        elif name == "disk":
            need = gib(device.items["model_files"]) / (1 - inputs.disk_headroom_fraction)
            extra["disk_bytes"] = math.ceil(need) * GIB
        else:
            return None  # a GPU, or the node's RAM: no other key makes room there
    node = devices.get("node")
    limit = extra.get("memory_limit_bytes", after.memory_limit_bytes)
    if node is not None and limit is not None and limit > (node.capacity_bytes or 0):
        # Never a limit the node cannot give: the most it can, where the buffers fit that.
        most = math.floor(gib(node.capacity_bytes or 0)) * GIB
        if "memory_limit_bytes" in changes or devices["ram"].used_bytes > most:
            return None
        extra["memory_limit_bytes"] = most
    also = [
        f"{_verb(inputs, name, value)} {STACK_KEYS[name]} to {_stack_value(name, value)}"
        for name, value in extra.items()
    ]
    return Fix(
        {
            STACK_KEYS[name]: _stack_value(name, value)
            for name, value in {**changes, **extra}.items()
            if name in STACK_KEYS  # what the keys derive (cpu_tensors) is not set apart
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


QUANTIZED_KV = "q8_0"
"""The KV cache type advice proposes: half of F16's bytes, llama.cpp's own lossless-in-practice
choice (the strix-halo stack's), measured by the compute-buffer model (`MEASURED_CACHE_TYPES`)."""


def kv_cache_fixes(inputs: LlamaCppPlanInputs, more_layers: bool = False) -> list[Fix]:
    """A q8_0 K and V cache where the stack's is wider (F16, F32, BF16), when it makes the plan
    fit with every layer where the stack put it (`more_layers`: and with the most layers the
    GPUs then hold, which is what frees host memory)."""
    wide = ("f32", "f16", "bf16")
    if inputs.cache_type_k not in wide and inputs.cache_type_v not in wide:
        return []
    changes: dict[str, Any] = {
        name: QUANTIZED_KV
        for name, value in (("cache_type_k", inputs.cache_type_k),
                            ("cache_type_v", inputs.cache_type_v))
        if value in wide
    }  # fmt: skip
    after = replace(
        inputs,
        cache_type_k=changes.get("cache_type_k", inputs.cache_type_k),
        cache_type_v=changes.get("cache_type_v", inputs.cache_type_v),
    )
    if not gpus_fit(after):
        return []
    keys = " and ".join(STACK_KEYS[name] for name in changes)
    text = f"set {keys} to {QUANTIZED_KV} (half the KV cache)"
    best = max_gpu_layers(after) if more_layers else None
    if best is not None and best > inputs.gpu_layers:
        changes["gpu_layers"] = best
        text += f" and server.gpuLayers to {best}"
    fix = checked_fix(inputs, text, **changes)
    return [fix] if fix else []


def n_cpu_moe_fixes(inputs: LlamaCppPlanInputs) -> list[Fix]:
    """`--n-cpu-moe N` with the fewest layers whose experts, kept in host RAM, let the GPUs
    hold the rest: for a MoE model whose header lists its tensors, where server.extraArgs
    keep no tensors on the CPU already."""
    tensors = inputs.tensors
    if tensors is None or inputs.cpu_tensors.bytes_by_where:
        return []
    n_layer = len(inputs.weights.layer_bytes)
    if not n_cpu_moe_tensors(n_layer, tensors).bytes_by_where:
        return []  # no expert weights: not a MoE model

    def at(layers: int) -> LlamaCppPlanInputs:
        return replace(inputs, cpu_tensors=n_cpu_moe_tensors(layers, tensors))

    if not gpus_fit(at(n_layer)):
        return []
    low, high = 1, n_layer
    while low < high:
        mid = (low + high) // 2
        if gpus_fit(at(mid)):
            high = mid
        else:
            low = mid + 1
    words = (*inputs.extra_args, "--n-cpu-moe", str(low))
    fix = checked_fix(
        inputs,
        f"add --n-cpu-moe {low} to server.extraArgs (the expert weights of the first {low} "
        "layers in host RAM; attention and the KV cache stay on the GPU)",
        extra_args=words,
        cpu_tensors=at(low).cpu_tensors,
    )
    return [fix] if fix else []


def use_text(device: Device, weights_of: str) -> str:
    """`weights X for <weights_of>, KV cache Y, compute Z`: what a refusal says a device holds."""
    items = device.items
    return (
        f"weights {fmt_size(items['weights'])} for {weights_of}, "
        f"KV cache {fmt_size(items['kv_cache'])}, compute {fmt_size(items['compute'])}"
    )


def vram_refusal(inputs: LlamaCppPlanInputs, vram: Device, gpu_text: str) -> tuple[str, list[Fix]]:
    """Why the GPU does not hold the plan, and the fixes that hold."""
    cap = vram.capacity_bytes or 0
    detail = use_text(vram, gpu_text)
    # In order of what they cost: a quantized KV cache (every layer stays on the GPU, the
    # answers move by float noise), then the experts of the first layers to the CPU (attention
    # and KV cache stay on the GPU; each token reads only the experts it routes to), then less
    # context or fewer slots, then whole layers to the CPU.
    fixes: list[Fix] = kv_cache_fixes(inputs)
    fixes += n_cpu_moe_fixes(inputs)
    ctx = max_context(inputs, gpus_only=True)
    shorter = context_fixes(inputs, ctx)
    fixes += shorter
    best = max_gpu_layers(inputs)
    if best is not None:
        fix = checked_fix(inputs, f"set server.gpuLayers to at most {best}", gpu_layers=best)
        fixes += [fix] if fix else []
    texts = [fix.text for fix in fixes]
    if not shorter:
        # Where a shorter context would fit but server.minSlotContext forbids it, say so.
        texts += [t for t in context_advice(inputs, ctx) if t not in texts]
    if not texts:
        texts.append("the model does not fit this GPU at any server.gpuLayers")
    return (
        f"plan: does not fit in VRAM: {fmt_size(vram.used_bytes)} needed of "
        f"{fmt_num(gib(cap))} GiB ({detail}): {' or '.join(texts)}"
    ), fixes
