"""The llama.cpp plan's advice on the host side: the container's memory limit and the node's RAM
(`memory.node`), and the volume during an upgrade; fixes checked against the whole plan as
`checked_fix` does."""

from __future__ import annotations

import math
from dataclasses import replace

from infra.plan.llamacpp_advice import (
    checked_fix,
    context_fixes,
    kv_cache_fixes,
    use_text,
)
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs
from infra.plan.llamacpp_placement import llamacpp_devices, max_context, max_gpu_layers
from infra.plan.report import GIB, MIB, Device, Fix, fmt_num, fmt_size, gib


def ram_refusal(inputs: LlamaCppPlanInputs, ram: Device, cpu_text: str) -> tuple[str, list[Fix]]:
    """Why the container memory does not hold the plan, and the fixes that hold."""
    cap = ram.capacity_bytes or 0
    items = ram.items
    detail = (
        f"{use_text(ram, cpu_text + ' + token_embd')}, "
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
    if not texts:
        texts.append(
            f"the node cannot give the container {need_gi}Gi: {NODE_KEY} decides; "
            + (node_texts(inputs) or "use a smaller quant or a smaller context")
        )
    return (
        f"plan: does not fit in the container memory limit: {fmt_size(ram.used_bytes)} needed of "
        f"{fmt_num(gib(cap))} GiB ({detail}): {' or '.join(texts)}"
    ), fixes


NODE_KEY = "memory.node"


def node_fixes(inputs: LlamaCppPlanInputs) -> list[Fix]:
    """What makes the host side fit the node's RAM, in order of cost: a quantized KV cache,
    less context (or fewer slots), more layers on the GPU."""
    fixes = kv_cache_fixes(inputs, more_layers=True)
    node = llamacpp_devices(inputs)[0]["node"]
    over = node.used_bytes - (node.capacity_bytes or 0)
    prompt = max(inputs.cache_ram_mib, 0) * MIB
    if over > 0 and prompt >= over:
        mib = (prompt - over) // MIB
        fix = checked_fix(inputs, f"set server.cacheRam to at most {mib} MiB", cache_ram_mib=mib)
        fixes += [fix] if fix else []
    # The context that fits the GPUs and the node; the container limit follows it.
    ctx = max_context(replace(inputs, memory_limit_bytes=None))
    fixes += context_fixes(inputs, ctx)
    best = max_gpu_layers(inputs)
    if best is not None and best > inputs.gpu_layers:
        fix = checked_fix(inputs, f"set server.gpuLayers to {best}", gpu_layers=best)
        fixes += [fix] if fix else []
    return fixes


def node_texts(inputs: LlamaCppPlanInputs) -> str:
    """`node_fixes`' texts, joined."""
    return " or ".join(fix.text for fix in node_fixes(inputs))


def node_refusal(inputs: LlamaCppPlanInputs, node: Device) -> tuple[str, list[Fix]]:
    """Why the node's RAM does not hold the host side (and the GPU beyond its carve-out)."""
    items = node.items
    beyond = items.get("gpu_beyond_carve_out", 0)
    detail = f"the container's host-side buffers {fmt_size(items['host_buffers'])}" + (
        f", GPU buffers beyond the carve-out {fmt_size(beyond)}" if beyond else ""
    )
    fixes = node_fixes(inputs)
    texts = [fix.text for fix in fixes] or [
        f"{NODE_KEY} decides: nothing fits at this model's size (a smaller quant, or a node "
        "with more RAM)"
    ]
    return (
        f"plan: does not fit in the node's RAM: {fmt_size(node.used_bytes)} needed of the "
        f"{fmt_num(gib(node.capacity_bytes or 0))} GiB the node gives the server ({NODE_KEY}: "
        f"installed RAM less the GPU's carve-out and what the OS and k3s keep; {detail}): "
        f"{' or '.join(texts)}"
    ), fixes


def node_limit_refusal(inputs: LlamaCppPlanInputs, node: Device) -> tuple[str, list[Fix]]:
    """A container limit above what the node can give (the buffers fit the node)."""
    limit = inputs.memory_limit_bytes or 0
    most = math.floor(gib(node.capacity_bytes or 0))
    fix = checked_fix(
        inputs,
        f"lower server.resources.limits.memory to {most}Gi",
        memory_limit_bytes=most * GIB,
    )
    return (
        f"plan: server.resources.limits.memory {fmt_num(gib(limit))} GiB is more than the "
        f"{fmt_num(gib(node.capacity_bytes or 0))} GiB the node gives the server ({NODE_KEY}): "
        "the node would run out of memory before the container reached its limit; "
        + (fix.text if fix else node_texts(inputs) or f"{NODE_KEY} decides: use a smaller quant")
    ), [fix] if fix else []


def node_refusals(inputs: LlamaCppPlanInputs, node: Device) -> tuple[list[str], list[Fix]]:
    """The node's RAM (`memory.node`): its refusal, else a container limit above it."""
    if not node.fits:
        text, fixes = node_refusal(inputs, node)
    elif (inputs.memory_limit_bytes or 0) > (node.capacity_bytes or 0):
        text, fixes = node_limit_refusal(inputs, node)
    else:
        return [], []
    return [text], fixes


def two_models_advice(inputs: LlamaCppPlanInputs, disk: Device) -> list[str]:
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
