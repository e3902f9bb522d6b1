"""How fast, before anything is downloaded: decode and prefill estimated from the plan.

Decode reads, per token, every active weight byte (a mixture of experts: the shared tensors and
`expert_used_count / expert_count` of the expert tensors) and the KV cache up to the depth, each
on the device that holds it, at that device's bandwidth (`infra.devices`). Prefill is
compute: 2 FLOPs per active parameter and per token, and the attention over the context. A
backend never reaches the published peaks; what it reaches is measured once per backend
(`infra.plan.speed_calibrations`): the shares of the peaks, fixed costs per layer, per layer of
experts, per weight, per KV element and per context token (kernel launches, synchronisation,
the CPU's dequantization: what makes a small model slower than its bytes), and, for layers left
on the CPU by a GPU process, what copying their weights and KV cache to the GPU costs at prefill.
Left out: speculative decoding, sampling, the HTTP path, batching of several slots.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.devices import GBPS, TFLOPS, DeviceFigures
from infra.plan.speed_calibrations import UNCALIBRATED, Efficiency, calibration_of, terms_of

GIB = 1 << 30
UBATCH = 512
"""Prompt tokens processed per step (llama-server's default `-ub`; the measurements' suffix)."""


@dataclass(frozen=True)
class Work:
    """What one device does per token: active weight bytes and parameters, KV bytes per
    context token, layers, and attention FLOPs per context token."""

    weight_bytes: float = 0.0
    params: float = 0.0
    kv_bytes_per_cell: float = 0.0
    layers: int = 0
    attention_flops_per_cell: float = 0.0
    kv_elements_per_cell: float = 0.0
    moe_layers: int = 0
    """Of `layers`, those with expert tensors."""


@dataclass(frozen=True)
class SpeedInputs:
    """What the estimate needs: the work on the device and on the host, their figures."""

    device: DeviceFigures
    host: DeviceFigures | None
    on_device: Work
    on_host: Work
    backend: str
    threads: int | None = None
    """CPU threads of the process (a CPU's compute scales with them)."""
    slot_context: int = 0
    concurrency: float | None = None
    """vLLM: requests of the full context the KV capacity holds at once."""
    prefill_known: bool = True
    """False where the active parameters are unknown (no GGUF header)."""


@dataclass(frozen=True)
class SpeedEstimate:
    """The plan's speed section: estimated figures and their inputs."""

    device: str
    backend: str
    calibration: str
    decode_tok_s: float
    decode_full_tok_s: float
    slot_context: int
    prefill_tok_s: float | None
    ttft_full_s: float | None
    ceiling_tok_s: float
    """Bandwidth / bytes per token at depth 0 (no backend is faster)."""
    bytes_per_token: float
    aggregate_tok_s: float | None = None
    concurrency: int | None = None
    inputs: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The plan's text lines."""
        lines = [
            f"speed (estimate, {self.device}; {self.backend}: {self.calibration}):",
            f"  decode: {self.decode_tok_s:,.1f} tok/s at depth 0, "
            f"{self.decode_full_tok_s:,.1f} tok/s at {self.slot_context:,} tokens "
            f"(bandwidth ceiling {self.ceiling_tok_s:,.1f} tok/s: "
            f"{self.bytes_per_token / GIB:.2f} GiB read per token)",
        ]
        if self.prefill_tok_s is not None and self.ttft_full_s is not None:
            lines.append(
                f"  prefill: {self.prefill_tok_s:,.0f} tok/s at depth 0; a {self.slot_context:,}-"
                f"token prompt: first token after ~{self.ttft_full_s:,.0f} s"
            )
        else:
            lines.append(
                "  prefill: not estimated (no GGUF header: the active parameters are unknown)"
            )
        if self.aggregate_tok_s is not None and self.concurrency is not None:
            lines.append(
                f"  aggregate: {self.aggregate_tok_s:,.1f} tok/s decode over {self.concurrency} "
                f"requests of {self.slot_context:,} tokens (the KV capacity's concurrency)"
            )
        lines += [f"  input: {i}" for i in self.inputs]
        return lines

    def to_json(self) -> dict[str, Any]:
        """The plan contract's `speed` object."""

        def r(value: float | None, digits: int = 1) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "estimate": True,
            "device": self.device,
            "backend": self.backend,
            "calibration": self.calibration,
            "decode_tok_s": r(self.decode_tok_s),
            "decode_full_context_tok_s": r(self.decode_full_tok_s),
            "slot_context": self.slot_context,
            "prefill_tok_s": r(self.prefill_tok_s, 0),
            "ttft_full_context_s": r(self.ttft_full_s),
            "ceiling_tok_s": r(self.ceiling_tok_s),
            "bytes_per_token": round(self.bytes_per_token),
            "aggregate_tok_s": r(self.aggregate_tok_s),
            "concurrency": self.concurrency,
            "inputs": list(self.inputs),
        }


def _cpu_tflops(figures: DeviceFigures, threads: int | None) -> float:
    if figures.kind == "cpu" and figures.cores and threads:
        return figures.tflops * min(threads, figures.cores) / figures.cores
    return figures.tflops


def decode_seconds(inputs: SpeedInputs, depth: int, eff: Efficiency, host_eff: Efficiency) -> float:
    """Seconds per decoded token at `depth` tokens of context."""
    seconds = 0.0
    sides = [(inputs.on_device, inputs.device, eff)]
    if inputs.host is not None:
        sides.append((inputs.on_host, inputs.host, host_eff))
    for work, figures, e in sides:
        bandwidth = figures.bandwidth_gbps * GBPS
        seconds += work.weight_bytes / (bandwidth * e.bandwidth)
        seconds += work.kv_bytes_per_cell * depth / (bandwidth * e.kv)
        flops = _cpu_tflops(figures, inputs.threads) * TFLOPS
        seconds += work.attention_flops_per_cell * depth / (flops * e.decode_attention)
        seconds += work.layers * e.layer_us * 1e-6 + work.moe_layers * e.moe_layer_us * 1e-6
        seconds += depth * (work.kv_elements_per_cell * e.kv_element_ps * 1e-12)
        seconds += depth * work.layers * e.cell_layer_ns * 1e-9
        seconds += work.params * e.param_ps * 1e-12
    return seconds


def prefill_seconds(
    inputs: SpeedInputs, depth: float, eff: Efficiency, host_eff: Efficiency
) -> float:
    """Seconds per prompt token at `depth` tokens of context, in steps of `UBATCH`. A GPU
    process runs every layer's matrix products and attention on the GPU (llama.cpp offloads a
    CPU layer's large batches) after copying that layer's weights and KV cache there."""
    device, host = inputs.on_device, inputs.on_host
    flops = _cpu_tflops(inputs.device, inputs.threads) * TFLOPS
    params = device.params + host.params
    attention = device.attention_flops_per_cell + host.attention_flops_per_cell
    layers = device.layers + host.layers
    seconds = 2 * params / (flops * eff.compute)
    seconds += attention * depth / (flops * eff.attention)
    seconds += layers * eff.ubatch_layer_ms * 1e-3 / UBATCH
    seconds += (device.moe_layers + host.moe_layers) * eff.ubatch_moe_layer_ms * 1e-3 / UBATCH
    seconds += depth * layers * eff.prefill_cell_layer_ns * 1e-9
    seconds += eff.ubatch_ms * 1e-3 / UBATCH
    if inputs.host is not None and host.layers:
        bandwidth = inputs.host.bandwidth_gbps * GBPS
        seconds += host.weight_bytes / (UBATCH * bandwidth * host_eff.copy_weights)
        seconds += host.kv_bytes_per_cell * depth / (UBATCH * bandwidth * host_eff.copy_kv)
    return seconds


def estimate(inputs: SpeedInputs, extra: tuple[str, ...] = ()) -> SpeedEstimate:
    """The speed section of a plan."""
    eff, host_eff, calibration = calibration_of(inputs.backend)
    full = inputs.slot_context
    decode0 = 1 / decode_seconds(inputs, 0, eff, host_eff)
    decode_full = 1 / decode_seconds(inputs, full, eff, host_eff)
    # The ceiling: every byte at the device's (and host's) full bandwidth, nothing else.
    ceiling = 1 / decode_seconds(inputs, 0, UNCALIBRATED, UNCALIBRATED)
    read = inputs.on_device.weight_bytes + inputs.on_host.weight_bytes
    prefill = ttft = None
    if inputs.prefill_known:
        prefill = 1 / prefill_seconds(inputs, UBATCH / 2, eff, host_eff)
        # A full-context prompt: the per-token cost grows linearly with the depth.
        start = prefill_seconds(inputs, 0, eff, host_eff)
        slope = prefill_seconds(inputs, 1, eff, host_eff) - start
        ttft = full * start + slope * full * full / 2
    aggregate = count = None
    if inputs.concurrency is not None:
        count = max(math.floor(inputs.concurrency), 1)
        work = inputs.on_device
        bandwidth = inputs.device.bandwidth_gbps * GBPS
        # One step reads the weights once for every request and each request's own KV.
        step = work.weight_bytes / (bandwidth * eff.bandwidth) + work.layers * eff.layer_us * 1e-6
        step += count * work.kv_bytes_per_cell * full / (bandwidth * eff.kv)
        aggregate = count / step
    host = inputs.host
    described = [
        f"device {inputs.device.label}: {inputs.device.bandwidth_gbps:g} GB/s, "
        f"{inputs.device.tflops:g} TFLOPS"
        + (", memory shared with the host" if inputs.device.shared_with_host else ""),
    ]
    if host is not None and inputs.on_host.layers:
        described.append(
            f"{inputs.on_host.layers} layers on the host CPU ({host.label}): "
            f"{host.bandwidth_gbps:g} GB/s, {inputs.on_host.weight_bytes / GIB:.2f} GiB a token"
        )
    described.append(
        f"weights read per token {read / GIB:.2f} GiB, KV cache "
        f"{(inputs.on_device.kv_bytes_per_cell + inputs.on_host.kv_bytes_per_cell) / 1024:,.1f}"
        " KiB per token of context"
    )
    described.append(
        f"efficiency: {terms_of(eff)}"
        + (
            f"; host CPU layers: {terms_of(host_eff)}"
            if host is not None and inputs.on_host.layers
            else ""
        )
    )
    return SpeedEstimate(
        device=inputs.device.label,
        backend=inputs.backend,
        calibration=calibration,
        decode_tok_s=decode0,
        decode_full_tok_s=decode_full,
        slot_context=full,
        prefill_tok_s=prefill,
        ttft_full_s=ttft,
        ceiling_tok_s=ceiling,
        bytes_per_token=read,
        aggregate_tok_s=aggregate,
        concurrency=count,
        inputs=(*described, *extra),
    )


def active_share(metadata: Mapping[str, Any], architecture: str) -> float | None:
    """`expert_used_count / expert_count` of a mixture of experts (None: dense or unknown)."""
    used = metadata.get(f"{architecture}.expert_used_count")
    count = metadata.get(f"{architecture}.expert_count")
    if isinstance(used, int) and isinstance(count, int) and count > 0 and 0 < used <= count:
        return used / count
    return None
