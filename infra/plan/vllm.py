"""The vLLM (ROCm) plan of one MI300X host: every weight in HBM, the CPU KV tier in host RAM."""

from __future__ import annotations

from dataclasses import dataclass

from infra.devices import DeviceFigures
from infra.plan.report import GB, GIB, Device, Plan, TableRow, fmt_num, fmt_size, gib
from infra.plan.speed import SpeedEstimate, SpeedInputs, Work, estimate
from infra.plan.vllm_kv import (
    DEEPSEEK_V4_FLASH,
    KvCacheLayout,
    kv_capacity,
    layout_assumption,
    too_long_problem,
)


@dataclass(frozen=True)
class VllmPlanInputs:
    """What a vLLM (ROCm) plan on one GPU host depends on; seed 002's values as defaults."""

    weights_bytes: int = int(156.67 * GIB)
    """Checkpoint bytes; all of it stays in HBM (no offload)."""
    hbm_bytes: int = 192 * GIB
    """MI300X: 192 GiB HBM3 (rocm-smi reports ~191.98 GiB)."""
    kv_cache_memory_bytes: int = 20 * GB
    """`--kv-cache-memory-bytes` (vLLM parses `20G` as 20·10^9): the GPU KV budget; it
    overrides `--gpu-memory-utilization`."""
    max_model_len: int = 262144
    """`--max-model-len`: the request length vLLM's concurrency figure counts."""
    max_num_batched_tokens: int = 2048
    """`--max-num-batched-tokens`: the tokens a step adds to each sliding window."""
    kv_layout: KvCacheLayout | None = DEEPSEEK_V4_FLASH
    """The model's KV bytes per token as vLLM allocates them (None: unknown, no token figures)."""
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
            f"lower server.kvCacheMemoryBytes to at most {room // GIB * GIB} ({room // GIB} GiB)"
            if room > 0
            else "the weights do not fit this GPU"
        )
        problems.append(
            f"plan: does not fit in HBM: {fmt_size(hbm.used_bytes)} needed of "
            f"{fmt_num(gib(hbm.capacity_bytes or 0))} GiB "
            f"(weights {fmt_size(inputs.weights_bytes)}, "
            f"KV cache {fmt_size(inputs.kv_cache_memory_bytes)}, activations "
            f"{fmt_size(inputs.activation_reserve_bytes)}): {fix}"
        )
    if not ram.fits:
        room = (ram.capacity_bytes or 0) - inputs.host_runtime_bytes - inputs.host_os_reserve_bytes
        problems.append(
            f"plan: does not fit in host RAM: {fmt_size(ram.used_bytes)} needed of "
            f"{fmt_num(gib(ram.capacity_bytes or 0))} GiB (CPU KV tier "
            f"{fmt_size(inputs.cpu_kv_tier_bytes)}, "
            f"runtime {fmt_size(inputs.host_runtime_bytes)}, "
            f"OS {fmt_size(inputs.host_os_reserve_bytes)}): set server.kvOffloadingSize to at most "
            f"{max(room, 0) // GIB} (GiB)"
        )
    if not disk.fits:
        problems.append(
            f"plan: does not fit on disk: {fmt_size(disk.used_bytes)} needed of "
            f"{fmt_size(disk.capacity_bytes or 0)} (weights {fmt_size(inputs.weights_bytes)}, "
            f"image {fmt_size(inputs.image_bytes)}, "
            f"headroom {fmt_size(inputs.disk_headroom_bytes)}): free "
            f"{fmt_size(disk.used_bytes - (disk.capacity_bytes or 0))} on the host or use a larger "
            f"disk"
        )
    kv = kv_capacity(
        inputs.kv_layout,
        max_model_len=inputs.max_model_len,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        budget_bytes=inputs.kv_cache_memory_bytes,
        cpu_tier_bytes=inputs.cpu_kv_tier_bytes,
    )
    too_long = too_long_problem(kv)
    if too_long is not None:
        problems.append(too_long)
    assumptions = [] if inputs.kv_layout is None else [layout_assumption(inputs.kv_layout)]
    advice = []
    # Seed 002: free HBM is small, so context, KV or concurrency changes can run out of memory.
    if hbm.fits and (hbm.capacity_bytes or 0) - hbm.used_bytes < 0.1 * (hbm.capacity_bytes or 0):
        advice.append(
            f"HBM has {fmt_size((hbm.capacity_bytes or 0) - hbm.used_bytes)} free: raising the "
            "context, KV cache or concurrency can run out of memory"
        )
    return Plan(
        devices, advice, problems, rows, [], "checkpoint size", assumptions=assumptions, kv=kv
    )


def vllm_speed(inputs: VllmPlanInputs, plan: Plan, device: DeviceFigures) -> SpeedEstimate | str:
    """Decode of one stream and of the KV capacity's concurrency, every weight in HBM. A
    safetensors checkpoint's lock holds no tensor shapes: every weight byte is counted (for a
    mixture of experts a floor on the speed) and prefill is not estimated."""
    if inputs.kv_layout is None or plan.kv is None or plan.kv.max_concurrency is None:
        return "not estimated: the plan knows no KV bytes per token for this model"
    work = Work(
        weight_bytes=inputs.weights_bytes, kv_bytes_per_cell=inputs.kv_layout.bytes_per_token
    )
    return estimate(
        SpeedInputs(
            device=device,
            host=None,
            on_device=work,
            on_host=Work(),
            backend="vllm-rocm",
            slot_context=inputs.max_model_len,
            concurrency=plan.kv.max_concurrency,
            prefill_known=False,
        ),
        (
            "every checkpoint byte counted per token (the lock holds no tensor shapes of a "
            "safetensors checkpoint, so a mixture of experts' active share is unknown): a floor",
            "speculative decoding not counted",
        ),
    )
