"""What a llama-server b11434 load log says (its last load): devices, offload, buffers, faults.

Standard library only; the acceleration gate (``gpu_gate``) judges what this reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from components.payloads.gate_ops import is_degraded

OFFLOADED_LINE = "load_tensors: offloaded N/M layers to GPU"
BUFFER_LINE = "load_tensors: <device> model buffer size = X MiB"
NO_GPU_WARNING = "no usable GPU found, --gpu-layers option will be ignored"
# "0.00.010.672 I load_tensors: ..." - timestamp and level letter are optional prefixes
# (--log-prefix/--log-timestamps), so they are stripped rather than required.
LINE_PREFIX = re.compile(r"^(?:\d+\.\d+\.\d+\.\d+\s+)?(?:[IWEDT]\s+)?")
_LOADING = "load_tensors: loading model tensors"
# Speculative decoding: the draft's load follows the target's (common/speculative.cpp).
DRAFT_LOADING = "common_speculative_init_result: loading draft model"
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
_REPEATING = re.compile(r"load_tensors: offloading (\d+) repeating layers to GPU")
_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([0-9.]+) MiB")
# KV caches (one line per cache; deepseek4 adds its compressor states) and the graph's compute
# buffers, per buffer type.
_KV_BUFFER = re.compile(
    r"(?:llama_kv_cache|llama_dsv4_comp_state):\s+(\S+) (?:KV|DSV4 \w+ state) buffer size ="
    r"\s+([0-9.]+) MiB"
)
_COMPUTE_BUFFER = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([0-9.]+) MiB")
_DEVICE_INFO = re.compile(r"^\s+- (\S+)\s*: (.*) \((\d+) MiB, (\d+) MiB free\)")
_VERBOSITY = re.compile(r"common_params_print_info: verbosity = (\d+)")
_FINISHED = re.compile(r"llama_server: model loaded|listening on http")
# Buffer types that live in host RAM: CPU, CPU_Mapped, CPU_REPACK, Vulkan_Host, CUDA_Host ...
_HOST_BUFFER = re.compile(r"^CPU|_Host$")


@dataclass
class LoadEvidence:
    """What a llama-server load log says about devices and offload (its last load)."""

    offloaded: int | None = None
    offloadable: int | None = None
    repeating: int | None = None
    gpu_buffers_mib: dict[str, float] = field(default_factory=dict)
    host_buffers_mib: dict[str, float] = field(default_factory=dict)
    kv_buffers_mib: dict[str, float] = field(default_factory=dict)
    """KV cache buffers by buffer type (GPU and host), as the model buffers."""
    compute_buffers_mib: dict[str, float] = field(default_factory=dict)
    """Compute (graph) buffers by buffer type."""
    devices: dict[str, str] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    """Messages (prefix stripped) that are a ``gate_ops`` degradation, in log order."""
    no_gpu_warning: bool = False
    saw_load_tensors: bool = False
    verbosity: int | None = None
    load_finished: bool = False
    loads: int = 0
    lines: int = 0
    draft: LoadEvidence | None = None
    """The speculative draft's load (its offload and buffers), after the target's; None: no
    draft was loaded. Its own devices, faults and state stay with the target's evidence."""

    def seen(self) -> str:
        """One line of what the log showed, for every verdict."""
        devices = ", ".join(f"{k} ({v})" for k, v in self.devices.items()) or "none listed"
        offload = (
            f"{self.offloaded}/{self.offloadable} layers offloaded"
            if self.offloaded is not None
            else "no offload line"
        )
        buffers = {**self.gpu_buffers_mib, **self.host_buffers_mib}
        bufs = ", ".join(f"{k} {v:.2f} MiB" for k, v in buffers.items()) or "none"
        state = "load finished" if self.load_finished else "load not finished"
        verbosity = "?" if self.verbosity is None else str(self.verbosity)
        warning = f"; stderr: '{NO_GPU_WARNING}'" if self.no_gpu_warning else ""
        degraded = f"; {len(self.degraded)} degradation lines" if self.degraded else ""
        return (
            f"seen: devices {devices}; {offload}; model buffers {bufs}; {state}; "
            f"-lv {verbosity}; {self.lines} lines{warning}{degraded}"
        )


def _message(line: str) -> str:
    """The log message of one line, for the plain and the ``--log-jsonl`` format."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            record = json.loads(stripped)
        except ValueError:
            return line
        if isinstance(record, dict) and isinstance(record.get("msg"), str):
            return str(record["msg"]).rstrip("\n")
        return ""
    return LINE_PREFIX.sub("", line.rstrip("\n"), count=1)


def is_host_buffer(buffer_type: str) -> bool:
    """Whether a buffer type lives in host RAM (`CPU`, `CPU_Mapped`, `Vulkan_Host`, ...)."""
    return bool(_HOST_BUFFER.search(buffer_type))


def parse_load_log(text: str) -> LoadEvidence:
    """Collect offload, buffer and device lines of the last load in a llama-server log (the
    target's; a speculative draft's load, which follows it, goes to `draft`)."""
    ev = LoadEvidence()
    load = ev  # whose load the offload and buffer lines describe: the target's, then the draft's
    in_device_info = False
    for raw in text.splitlines():
        ev.lines += 1
        msg = _message(raw)
        if DRAFT_LOADING in msg:
            load = ev.draft = LoadEvidence()
            continue
        if NO_GPU_WARNING in msg:
            ev.no_gpu_warning = True
        if is_degraded(msg):
            ev.degraded.append(msg)
        if m := _VERBOSITY.search(msg):
            ev.verbosity = int(m[1])
        if _FINISHED.search(msg):
            ev.load_finished = True
        if "load_tensors:" in msg:
            load.saw_load_tensors = True
        if _LOADING in msg:
            # A new load (the -lv 5 memory-fit dry run comes first): only the last one counts.
            load.loads += 1
            load.offloaded = load.offloadable = load.repeating = None
            load.gpu_buffers_mib, load.host_buffers_mib = {}, {}
            load.kv_buffers_mib, load.compute_buffers_mib = {}, {}
        elif m := _OFFLOADED.search(msg):
            load.offloaded, load.offloadable = int(m[1]), int(m[2])
        elif m := _REPEATING.search(msg):
            load.repeating = int(m[1])
        elif m := _BUFFER.search(msg):
            target = load.host_buffers_mib if is_host_buffer(m[1]) else load.gpu_buffers_mib
            target[m[1]] = target.get(m[1], 0.0) + float(m[2])
        elif m := _KV_BUFFER.search(msg):
            load.kv_buffers_mib[m[1]] = load.kv_buffers_mib.get(m[1], 0.0) + float(m[2])
        elif m := _COMPUTE_BUFFER.search(msg):
            load.compute_buffers_mib[m[1]] = load.compute_buffers_mib.get(m[1], 0.0) + float(m[2])
        if "device_info:" in msg:
            in_device_info = True
            continue
        if in_device_info:
            if m := _DEVICE_INFO.search(msg.split("common_param:", 1)[-1]):
                ev.devices[m[1]] = m[2]
            else:
                in_device_info = False
    return ev
