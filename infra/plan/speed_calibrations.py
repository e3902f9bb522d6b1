"""What each backend reaches of a device's published peaks, measured once per backend
(`bench.speed_estimate` derives the figures from the recorded runs; its test holds the table to
them): the shares of a peak and the fixed costs `infra.plan.speed` adds up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Efficiency:
    """What one backend reaches of a device's peaks, as measured."""

    bandwidth: float
    """Share of the peak bandwidth reading weights at decode."""
    kv: float
    """Share of the peak bandwidth reading the KV cache at decode (attention)."""
    layer_us: float
    """Fixed microseconds per layer per decoded token."""
    compute: float = 1.0
    """Share of the peak FLOPS in the prompt's matrix products."""
    attention: float = 1.0
    """Share of the peak FLOPS in the prompt's attention over the context."""
    ubatch_layer_ms: float = 0.0
    """Fixed milliseconds per layer per prompt step of `UBATCH` tokens."""
    copy_weights: float = 1.0
    """CPU layers of a GPU process at prefill: share of the host's bandwidth at which their
    weights reach the GPU each step."""
    copy_kv: float = 1.0
    """The same for their KV cache."""
    decode_attention: float = math.inf
    """Share of the peak FLOPS of the attention over the context at decode, where it is bound
    by compute rather than by reading the KV cache (llama.cpp's CPU attention works query head
    by query head: a grouped-query model reads fewer KV bytes for as much work); inf: no such
    term."""
    kv_element_ps: float = 0.0
    """Picoseconds per KV cache element (of a context token, over every layer) at decode, where
    the attention costs by element whatever the cache type (it turns a q8_0 cache into floats
    as it reads it, so a byte of it costs about twice an F16 byte)."""
    cell_layer_ns: float = 0.0
    """Fixed nanoseconds per context token and layer at decode (the attention's work per
    entry beside its bytes)."""
    moe_layer_us: float = 0.0
    """Fixed microseconds per mixture-of-experts layer per decoded token beyond a dense one's
    (routing, top-k, the expert products' dispatch)."""
    ubatch_moe_layer_ms: float = 0.0
    """The same per prompt step of `UBATCH` tokens."""
    prefill_cell_layer_ns: float = 0.0
    """Fixed nanoseconds per context token and layer per prompt token."""
    ubatch_ms: float = 0.0
    """Fixed milliseconds per prompt step of `UBATCH` tokens, whatever the layers (the graph's
    launch and the step's synchronisation)."""
    param_ps: float = 0.0
    """Picoseconds per active weight (parameter) per decoded token, beside its bytes (a CPU
    dequantizes and multiplies each weight: a Q8_0 weight costs more than its bytes say)."""


@dataclass(frozen=True)
class Calibration:
    """One backend's measured efficiency on its device and, in a GPU process, on the host."""

    backend: str
    device: Efficiency
    host: Efficiency | None
    """CPU-resident layers of a GPU process (None: a CPU process has only `device`)."""
    measured: str
    """Which runs it was derived from (the plan prints it)."""


# Derived by `python -m bench.speed_estimate` from the recorded runs named in `measured`, to 3
# significant digits (tests/unit/test_speed_estimate.py derives them again from the same runs
# and checks the estimate on the runs they were not derived from). `inf`: a term the backend
# does not have there.
CALIBRATIONS: dict[str, Calibration | None] = {
    # llama-server's CPU build (the haswell variant, one thread) on an AMD EPYC 7003 (a 2-core
    # share of one): generated F16 llamas dense-8x1024 and dense-24x512 at depths 0 and 4096
    # (tests/fixtures/speed/cpu.json); a Q8_0 grouped-query llama and two MoEs check them.
    "cpu": Calibration(
        "cpu",
        device=Efficiency(
            bandwidth=0.0814,
            kv=math.inf,
            layer_us=807.0,
            compute=0.985,
            attention=0.247,
            ubatch_layer_ms=5.02,
            copy_weights=math.inf,
            copy_kv=math.inf,
            decode_attention=0.0467,
        ),
        host=None,
        measured="llama-server's CPU build, dense-8x1024, dense-24x512",
    ),
    # One NVIDIA H100 through NVIDIA's Vulkan driver (bench.speed_estimate derives these): the
    # GPU's terms from six generated shapes of GiBs with every layer on the GPU, the host's (its
    # Xeon, 8 threads) from the same shapes with half their layers on it, all on one machine in
    # one call (tests/fixtures/speed/vulkan.json); four shapes declared before that run, two of
    # 1.6 GiB layers and the runs on other machines of the kind check them.
    "vulkan": Calibration(
        "vulkan",
        device=Efficiency(
            bandwidth=0.59,
            kv=math.inf,
            layer_us=43.7,
            compute=0.196,
            attention=0.202,
            ubatch_layer_ms=0.0944,
            copy_weights=math.inf,
            copy_kv=math.inf,
            decode_attention=math.inf,
            kv_element_ps=0.561,
            cell_layer_ns=1.23,
            moe_layer_us=21.2,
            ubatch_moe_layer_ms=0.168,
            prefill_cell_layer_ns=0.0414,
            ubatch_ms=8.1,
        ),
        host=Efficiency(
            bandwidth=0.249,
            kv=math.inf,
            layer_us=289.0,
            compute=math.inf,
            attention=math.inf,
            ubatch_layer_ms=0.0,
            copy_weights=0.0616,
            copy_kv=0.0192,
            decode_attention=0.052,
            kv_element_ps=72.7,
            param_ps=4.03,
        ),
        measured=(
            "H100 (one machine, one call): dense-32x2048, moe-16x1024, dense-28x1536, "
            "dense-20x2560-q8, moe-24x1024, moe-12x2048, every layer and half on the GPU"
        ),
    ),
    "rocm": None,
    "vllm-rocm": None,
}
"""Per backend; None: never measured, the estimate is the uncalibrated physical ceiling."""

UNCALIBRATED = Efficiency(bandwidth=1.0, kv=1.0, layer_us=0.0)


_SHARES = (
    ("bandwidth", "bandwidth"), ("kv", "KV cache"), ("decode_attention", "decode attention"),
    ("compute", "compute"), ("attention", "prefill attention"),
    ("copy_weights", "weights copied at prefill"), ("copy_kv", "KV cache copied at prefill"),
)  # fmt: skip
_COSTS = (
    ("layer_us", "{:.3g} us per layer"), ("moe_layer_us", "{:.3g} us per MoE layer"),
    ("param_ps", "{:.3g} ps per weight"), ("kv_element_ps", "{:.3g} ps per KV element"),
    ("cell_layer_ns", "{:.3g} ns per context token and layer"),
    ("ubatch_layer_ms", "{:.3g} ms per layer per prompt step"),
    ("ubatch_moe_layer_ms", "{:.3g} ms per MoE layer per prompt step"),
    ("prefill_cell_layer_ns", "{:.3g} ns per context token and layer per prompt token"),
    ("ubatch_ms", "{:.3g} ms per prompt step"),
)  # fmt: skip


def terms_of(eff: Efficiency) -> str:
    """An efficiency's terms that count, in words: the shares of a peak (x1: the peak), then
    the fixed costs (per decoded token unless a prompt step is named)."""
    if eff == UNCALIBRATED:
        return "none measured for this backend: the published peaks, no fixed costs"
    shares = [f"{label} x{getattr(eff, name):.3g}" for name, label in _SHARES
              if math.isfinite(getattr(eff, name))]  # fmt: skip
    costs = [form.format(getattr(eff, name)) for name, form in _COSTS if getattr(eff, name)]
    return ", ".join(shares + costs)


def calibration_of(backend: str) -> tuple[Efficiency, Efficiency, str]:
    """The device's and the host's efficiency of a backend, and what it rests on."""
    found = CALIBRATIONS.get(backend)
    if found is None:
        return UNCALIBRATED, UNCALIBRATED, "not calibrated: the physical ceiling, factor 1"
    return found.device, found.host or found.device, f"calibrated on {found.measured}"
