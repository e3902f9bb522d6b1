"""The devices the speed estimate knows: memory bandwidth, compute, and the host's memory.

Decode is bound by memory bandwidth (every byte of the active weights and the KV cache is read
once per token), prefill by compute. Each figure is the vendor's published peak; what a backend
really reaches of it is its calibration (`infra.plan.speed`). A stack names its device with
`memory.device` and may override any figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

GBPS = 10**9
"""Bytes per second in one GB/s (vendors publish decimal units)."""
TFLOPS = 10**12


@dataclass(frozen=True)
class DeviceFigures:
    """One device's published peaks."""

    label: str
    """What it is, as the plan prints it."""
    bandwidth_gbps: float
    """Peak memory bandwidth (GB/s)."""
    tflops: float
    """Peak dense throughput of the precision that matters for inference (FP16 matrix; a CPU:
    FP32 FMA over all its cores), TFLOPS."""
    kind: Literal["gpu", "cpu"]
    shared_with_host: bool
    """Whether the device's memory is the host's (unified): layers on the CPU then read the
    same memory at the same peak."""
    host: str | None = None
    """The table entry of the host CPU that runs layers left off the GPU (a GPU only)."""
    cores: int | None = None
    """A CPU's cores: a process with fewer threads gets that share of its compute."""


DEVICES: dict[str, DeviceFigures] = {
    # Ryzen AI Max+ 395 (Strix Halo): 256-bit LPDDR5X-8000, 8000 MT/s x 32 bytes = 256 GB/s,
    # one memory for CPU and GPU (AMD's product page; svethardware.cz/amd-predstavuje-ryzen-
    # ai-max-strix-halo-s-az-16-jadry-a-gpu-se-40-cu/61477). Radeon 8060S: 40 RDNA 3.5 CUs at
    # 2.9 GHz; 40 CUs x 64 lanes x 2 (FMA) x 2 (dual issue) x 2 (packed FP16) x 2.9 GHz
    # = 59.4 TFLOPS FP16 (the WMMA peak of RDNA 3.x is the same rate).
    "radeon-8060s": DeviceFigures(
        "AMD Radeon 8060S (Ryzen AI Max+ 395, LPDDR5X-8000 unified)",
        256,
        59.4,
        "gpu",
        True,
        host="ryzen-ai-max-395",
    ),
    # Its 16 Zen 5 cores on the same memory; 16 x 2 x 512-bit FMA (32 FP32 FLOPs x 2) at the
    # 3.0 GHz base clock = 3.1 TFLOPS FP32.
    "ryzen-ai-max-395": DeviceFigures(
        "AMD Ryzen AI Max+ 395 CPU (16 Zen 5 cores, LPDDR5X-8000 unified)",
        256,
        3.1,
        "cpu",
        True,
        cores=16,
    ),
    # AMD Instinct MI300X: 192 GB HBM3 at 5.3 TB/s, 1307.4 TFLOPS FP16 dense (2614.9 with
    # sparsity) (AMD's MI300X data sheet; seed 002 states the 5.3 TB/s).
    "mi300x": DeviceFigures(
        "AMD Instinct MI300X (HBM3)",
        5300,
        1307.4,
        "gpu",
        False,
        host="epyc-9004",
    ),
    # An MI300X platform's host: AMD EPYC 9004 (Genoa), 12 channels of DDR5-4800 per socket =
    # 460.8 GB/s; 96 Zen 4 cores x 32 FP32 FLOPs (2 x 256-bit FMA) x 2.4 GHz = 7.4 TFLOPS.
    "epyc-9004": DeviceFigures(
        "AMD EPYC 9004 host (12 x DDR5-4800 per socket)",
        460.8,
        7.4,
        "cpu",
        False,
        cores=96,
    ),
    # NVIDIA H100 SXM5 80GB HBM3: 3.35 TB/s, 989.4 TFLOPS FP16 dense tensor (NVIDIA's H100
    # data sheet; glennklockwood.com/garden/processors/h100). The project's GPU runs
    # (tests/fixtures/tune/h100/) used one through NVIDIA's Vulkan driver.
    "h100-sxm": DeviceFigures(
        "NVIDIA H100 80GB HBM3 SXM",
        3350,
        989.4,
        "gpu",
        False,
        host="xeon-4th-gen",
    ),
    # NVIDIA H200: 141 GB HBM3e at 4.8 TB/s, the H100's compute (NVIDIA's H200 data sheet).
    "h200": DeviceFigures(
        "NVIDIA H200 141GB HBM3e",
        4800,
        989.4,
        "gpu",
        False,
        host="xeon-4th-gen",
    ),
    # The GPU machines' host ("Intel(R) Xeon(R) Processor" in their logs): 4th-generation Xeon
    # Scalable (Sapphire Rapids), 8 channels of DDR5-4800 = 307.2 GB/s per socket; 56 cores
    # x 64 FP32 FLOPs (2 x 512-bit FMA) x 2.0 GHz = 7.2 TFLOPS.
    "xeon-4th-gen": DeviceFigures(
        "Intel Xeon 4th gen host (8 x DDR5-4800)",
        307.2,
        7.2,
        "cpu",
        False,
        cores=56,
    ),
    # The CPU of the machine the CPU calibration ran on (`AMD EPYC`, family 25 model 1: Milan):
    # EPYC 7003, 8 channels of DDR4-3200 = 204.8 GB/s; 64 Zen 3 cores x 32 FP32 FLOPs x 2.45 GHz
    # = 5.0 TFLOPS.
    "epyc-7003": DeviceFigures(
        "AMD EPYC 7003 host (8 x DDR4-3200)",
        204.8,
        5.0,
        "cpu",
        False,
        cores=64,
    ),
}
"""The device table, declared once: `memory.device` names an entry."""


def device_figures(
    name: str,
    *,
    bandwidth_gbps: float | None = None,
    tflops: float | None = None,
    host_bandwidth_gbps: float | None = None,
) -> tuple[DeviceFigures, DeviceFigures | None]:
    """A table entry and its host with a stack's overrides (`memory.device`)."""
    device = DEVICES[name]
    host = DEVICES[device.host] if device.host is not None else None
    if bandwidth_gbps is not None:
        device = replace(device, bandwidth_gbps=bandwidth_gbps)
        if host is not None and device.shared_with_host and host_bandwidth_gbps is None:
            host = replace(host, bandwidth_gbps=bandwidth_gbps)
    if tflops is not None:
        device = replace(device, tflops=tflops)
    if host is not None and host_bandwidth_gbps is not None:
        host = replace(host, bandwidth_gbps=host_bandwidth_gbps)
    return device, host


def decode_ceiling(bandwidth_gbps: float, bytes_per_token: float) -> float:
    """The physical decode ceiling (tok/s): the device's bandwidth over the bytes one token
    reads. No backend decodes faster; a measured figure above it is impossible."""
    if bytes_per_token <= 0:
        return float("inf")
    return bandwidth_gbps * GBPS / bytes_per_token
