"""Acceleration gate: did llama-server really put the configured layers on a GPU?

Standard library only: the back-end of ``llm-infra gpu-gate``, and read on a GPU machine's plain
Python by the bench scripts (``bench/gpu_run.py``, ``bench/compute_buffers.py``).

What llama-server b11434 prints, and all the gate takes as evidence (from its source and from
real runs: the CPU build here, the Vulkan build on an NVIDIA H200, ``tests/fixtures/gpu_gate/``):

* ``warning: no usable GPU found, --gpu-layers option will be ignored`` - a plain
  ``fprintf(stderr)`` while parsing ``-ngl`` when no GPU device exists, at any verbosity and
  never in ``--log-file``;
* ``common_params_print_info: verbosity = N`` - INFO (``-lv 3``), so a log says its own
  verbosity;
* ``device_info:`` then ``  - Vulkan0 : <description> (T MiB, F MiB free)`` per device - ``-lv 4``;
* ``load_tensors: loading model tensors, ...``, ``load_tensors: offloaded N/M layers to GPU``
  (M = layers + 1, the output layer counts) and ``load_tensors: <buffer> model buffer size =
  X MiB`` (``Vulkan0``, ``CPU_Mapped``, ...) - libllama INFO, which the server's logger maps to
  verbosity 4 (``-lv 4``); the offload lines exist only when a GPU device exists. At ``-lv 5``
  the memory fit's dry run prints its own load (``Vulkan0 model buffer size = 0.00 MiB``):
  only the last load counts, and a zero-size buffer is never evidence;
* ``llama_server: model loaded`` and ``listening on ...`` - INFO: the load has finished;
* any line of ``gate_ops.DEGRADATIONS``: a backend turned a feature off or an op fell back
  (the whole log counts: the memory fit's dry run and the device probing come first);
* and, with a server URL, the answer to one one-token request (``gate_decode``): a build that
  loads and then aborts at the first decode fails there.

``ggml_vulkan:`` lines are not printed at ``-lv 4`` or ``-lv 5`` by b11434, so they are not read.

The log volume stays bounded: in the pod, ``--log-file`` is a FIFO whose reader keeps the load,
up to ``listening on``, in the log file the probe reads and drops what follows; the container's
stdout (``kubectl logs``, rotated by the kubelet) keeps everything. That container command and
the probe, shell for an image without Python, are ``components/llamacpp/gate.py``. Reading the log
is ``gate_log``'s (re-exported here); this module judges what it read.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from components.payloads.gate_decode import DECODE_TIMEOUT_S, first_decode, read_api_key
from components.payloads.gate_log import (
    BUFFER_LINE,
    LINE_PREFIX,
    NO_GPU_WARNING,
    OFFLOADED_LINE,
    LoadEvidence,
    is_host_buffer,
    parse_load_log,
)
from components.payloads.gate_ops import degradation_findings

_PREFIX = LINE_PREFIX  # the name the gate's tests strip a log line's prefix by

__all__ = [
    "BUFFER_LINE",
    "NO_GPU_WARNING",
    "OFFLOADED_LINE",
    "LoadEvidence",
    "is_host_buffer",
    "parse_load_log",
]

# Without these the log cannot prove anything; say so instead of guessing.
BACKEND_DEVICE_PREFIX: dict[str, str | None] = {"vulkan": "Vulkan", "rocm": "ROCm", "cpu": None}
"""The device names a backend's load log shows (`Vulkan0`, `ROCm0`); None: no GPU, every layer
on the host. The runtimes (components/llamacpp/runtimes.py) and the bake-off read it here."""
VERBOSITY_HINT = (
    "llama-server b11434 logs load_tensors lines only at verbosity >= 4: "
    "pass -lv 4 (or LLAMA_ARG_LOG_VERBOSITY=4)"
)
NO_GPU_CAUSE = (
    "likely cause: llama-server found no usable GPU and runs every layer on the CPU - the "
    "container cannot open the GPU (/dev/dri not mounted, or not readable without the render "
    "group: the pod supplementalGroups), or the Vulkan driver (ICD) of the image does not see the "
    "device; `llama-server --list-devices` in the container shows what it sees"
)
DRAFT_LAYERS_CAUSE = (
    "likely cause: --spec-draft-ngl below the draft's layers, or too little free device memory "
    "left for the draft after the target's fit"
)
FEWER_LAYERS_CAUSE = (
    "likely cause: -ngl is lower than configured, or the memory fit of llama-server (-fit, on by "
    "default) lowered it because the device had too little free memory (see device_info and "
    "the common_params_fit lines)"
)


@dataclass
class GateResult:
    """Verdict of the gate: ``ok`` plus one line per problem and the evidence used."""

    ok: bool
    problems: list[str]
    evidence: LoadEvidence
    host_only: bool = False
    """Checked for the CPU build: every layer on the host is the success."""

    def summary(self) -> str:
        """One human-readable paragraph (first line: PASS/FAIL, then what was seen)."""
        ev = self.evidence
        head = "PASS" if self.ok else "FAIL"
        layers = (
            f"{ev.offloaded}/{ev.offloadable} layers on GPU"
            if ev.offloaded is not None
            else "every layer on the host"
            if self.host_only
            else "offload line missing"
        )
        gpu = ", ".join(f"{k} {v:.2f} MiB" for k, v in ev.gpu_buffers_mib.items()) or "none"
        lines = [f"gpu-gate: {head}: {layers}; GPU model buffers: {gpu}"]
        lines.append(f"gpu-gate:   {ev.seen()}")
        lines += [f"gpu-gate:   - {p}" for p in self.problems]
        return "\n".join(lines)


def _no_offload_problem(ev: LoadEvidence) -> str:
    """Why the offload line is missing: low verbosity, still loading, or no GPU at all."""
    missing = f"no '{OFFLOADED_LINE}' line"
    if ev.verbosity is not None and ev.verbosity < 4:
        return f"{missing}: the log is at verbosity {ev.verbosity}; {VERBOSITY_HINT}"
    if not ev.saw_load_tensors:
        if ev.load_finished:
            return (
                f"{missing} and no load_tensors line at all after a finished load; {VERBOSITY_HINT}"
            )
        return f"{missing} yet: the model load has not reached load_tensors (still loading?)"
    if ev.load_finished or ev.gpu_buffers_mib or ev.host_buffers_mib:
        # The buffer lines follow the offload decision in the same function: it was made.
        return f"{missing} after a finished load: no GPU was used; {NO_GPU_CAUSE}"
    return f"{missing} yet: the model is still loading"


def evaluate_host(ev: LoadEvidence, rpc_endpoints: tuple[str, ...] | list[str] = ()) -> GateResult:
    """The gate of a runtime without a GPU (the CPU build): the last load holds its weights in
    non-zero host model buffers and none on a GPU (an RPC worker's, ``RPC<n>[host:port]``, is
    allowed: listed in ``rpc_endpoints``, it must hold one). The buffers decide, not the offload
    line: a CPU build with the RPC backend logs ``offloaded N/N layers to GPU`` with every
    buffer on the CPU, and any CPU build prints the no-GPU warning for ``-ngl`` (expected)."""
    problems = degradation_findings(ev.degraded) + _rpc_problems(ev, rpc_endpoints)
    if ev.verbosity is not None and ev.verbosity < 4:
        problems.append(f"the log is at verbosity {ev.verbosity}; {VERBOSITY_HINT}")
    gpu = {k: v for k, v in ev.gpu_buffers_mib.items() if v > 0 and not _RPC_BUFFER.match(k)}
    if gpu:
        found = ", ".join(f"{k} {v:.2f} MiB" for k, v in gpu.items())
        problems.append(f"non-zero GPU model buffers ({found}), where the runtime expects none")
    if not any(v > 0 for v in ev.host_buffers_mib.values()):
        if ev.saw_load_tensors or ev.load_finished:
            problems.append(
                f"expected a non-zero host '{BUFFER_LINE}' line (CPU, CPU_Mapped) and found none "
                f"({VERBOSITY_HINT})"
            )
        else:
            problems.append("no model buffer line yet: the model is still loading")
    return GateResult(ok=not problems, problems=problems, evidence=ev, host_only=True)


_RPC_BUFFER = re.compile(r"^RPC\d+\[")


def _rpc_problems(ev: LoadEvidence, rpc_endpoints: tuple[str, ...] | list[str]) -> list[str]:
    """Each rpc-server of ``rpc_endpoints`` without a non-zero model buffer in a finished load."""
    problems = []
    for endpoint in rpc_endpoints:
        held = sum(v for k, v in ev.gpu_buffers_mib.items() if k.endswith(f"[{endpoint}]"))
        if held <= 0 and (ev.gpu_buffers_mib or ev.host_buffers_mib):
            problems.append(
                f"no non-zero model buffer on the RPC device {endpoint}: the layers meant for "
                "that worker did not land there (is it the same llama.cpp build, reachable?)"
            )
    return problems


def evaluate(
    ev: LoadEvidence,
    expect_layers: int | None,
    *,
    device_prefix: str | None = "Vulkan",
    min_gpu_buffer_mib: float = 0.0,
    rpc_endpoints: tuple[str, ...] | list[str] = (),
) -> GateResult:
    """Decide from parsed evidence; ``expect_layers`` None means all layers (``-ngl all``).

    With ``rpc_endpoints`` (the ``--rpc`` list) each rpc-server must also hold a non-zero
    model buffer (``RPC<n>[host:port] model buffer size``): its share of the layers landed.
    Without ``device_prefix`` (None or empty: a runtime without a GPU) `evaluate_host` decides.
    Every degradation line (``gate_ops``) is a problem of its own, first, as the probe prints
    them, whatever the runtime.
    """
    if not device_prefix:
        return evaluate_host(ev, rpc_endpoints)
    problems = degradation_findings(ev.degraded) + _rpc_problems(ev, rpc_endpoints)
    if ev.no_gpu_warning:
        problems.append(f"llama-server printed 'warning: {NO_GPU_WARNING}'; {NO_GPU_CAUSE}")
    if ev.offloaded is None or ev.offloadable is None:
        problems.append(_no_offload_problem(ev))
    else:
        wanted = ev.offloadable if expect_layers is None else min(expect_layers, ev.offloadable)
        if ev.offloaded < wanted:
            problems.append(
                f"only {ev.offloaded}/{ev.offloadable} layers offloaded, expected {wanted} "
                f"(configured {'all' if expect_layers is None else expect_layers}); "
                f"{FEWER_LAYERS_CAUSE}"
            )
    device = {k: v for k, v in ev.gpu_buffers_mib.items() if k.startswith(device_prefix)}
    nonzero = {k: v for k, v in device.items() if v > 0}
    if not ev.gpu_buffers_mib and not ev.host_buffers_mib:
        if ev.saw_load_tensors or ev.load_finished:
            problems.append(f"expected '{BUFFER_LINE}' lines and found none ({VERBOSITY_HINT})")
    elif not nonzero:
        found = ", ".join(
            f"{k} {v:.2f} MiB" for k, v in {**ev.gpu_buffers_mib, **ev.host_buffers_mib}.items()
        )
        if device:
            what = "only zero-size ones (a dry run's or no-alloc load's: never evidence)"
        else:
            what = "only other buffers"
        problems.append(
            f"expected a non-zero '{device_prefix}<N> model buffer size' line; {what}: {found}"
        )
    elif sum(nonzero.values()) <= min_gpu_buffer_mib:
        problems.append(
            f"{device_prefix} model buffers total {sum(nonzero.values()):.2f} MiB, "
            f"expected more than {min_gpu_buffer_mib:.2f} MiB"
        )
    if ev.draft is not None:
        problems += draft_problems(ev.draft, device_prefix)
    return GateResult(ok=not problems, problems=problems, evidence=ev)


def draft_problems(draft: LoadEvidence, device_prefix: str) -> list[str]:
    """A speculative draft must sit wholly on the GPU (a draft on the CPU drafts slower than
    the target decodes): every one of its layers offloaded and a non-zero model buffer on the
    device."""
    buffers = {**draft.gpu_buffers_mib, **draft.host_buffers_mib}
    seen = "model buffers " + (", ".join(f"{k} {v:.2f} MiB" for k, v in buffers.items()) or "none")
    if draft.offloaded is None or draft.offloadable is None:
        return [f"the speculative draft: no '{OFFLOADED_LINE}' line for it; {seen}"]
    problems = []
    if draft.offloaded < draft.offloadable:
        problems.append(
            f"the speculative draft: only {draft.offloaded}/{draft.offloadable} of its layers "
            f"offloaded, expected all; {seen}; {DRAFT_LAYERS_CAUSE}"
        )
    if not any(v > 0 for k, v in draft.gpu_buffers_mib.items() if k.startswith(device_prefix)):
        problems.append(
            f"the speculative draft: no non-zero '{device_prefix}<N> model buffer size' line "
            f"for it; {seen}"
        )
    return problems


def check_log(
    text: str,
    expect_layers: int | None,
    *,
    device_prefix: str | None = "Vulkan",
    min_gpu_buffer_mib: float = 0.0,
    rpc_endpoints: tuple[str, ...] | list[str] = (),
) -> GateResult:
    """Parse and evaluate a llama-server log in one call."""
    return evaluate(
        parse_load_log(text),
        expect_layers,
        device_prefix=device_prefix,
        min_gpu_buffer_mib=min_gpu_buffer_mib,
        rpc_endpoints=rpc_endpoints,
    )


def wait_healthy(base_url: str, timeout: float, interval: float = 2.0) -> bool:
    """Poll ``/health`` until 200 (loading done, so the load log is complete)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of `llm-infra gpu-gate`."""
    parser.add_argument("--log", required=True, help="llama-server log (stderr or --log-file)")
    parser.add_argument(
        "--expect-layers", default="all", help="configured -ngl (a number or 'all')"
    )
    parser.add_argument(
        "--device-prefix",
        default="Vulkan",
        help="the GPU devices' name prefix in the log (Vulkan, ROCm); empty: a CPU build, "
        "whose success is every layer on the host",
    )
    parser.add_argument(
        "--min-gpu-mib",
        type=float,
        default=0.0,
        help="fail when the GPU model buffers hold fewer MiB than this",
    )
    parser.add_argument(
        "--rpc", default="", help="the server's --rpc list: each worker must hold a model buffer"
    )
    parser.add_argument(
        "--wait-url", help="poll URL/health first, so the log is complete (default: no wait)"
    )
    parser.add_argument(
        "--wait-timeout", type=float, default=3600.0, help="seconds to wait for --wait-url"
    )
    parser.add_argument(
        "--first-decode",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --wait-url, after a passing log: one POST /completion of one token must be "
        "answered (a crash at the first decode fails the gate)",
    )
    parser.add_argument(
        "--api-key-file",
        help="the server's --api-key-file, for the first decode (default: $LLAMA_API_KEY)",
    )
    parser.add_argument(
        "--decode-timeout",
        type=float,
        default=float(DECODE_TIMEOUT_S),
        help="seconds the first decode may take",
    )


def run(args: argparse.Namespace) -> int:
    """Check the log, then (with a server URL) the first decode; 0 pass, 1 fail."""
    if args.wait_url and not wait_healthy(args.wait_url.rstrip("/"), args.wait_timeout):
        print(f"gpu-gate: FAIL: {args.wait_url}/health not 200 in time", file=sys.stderr)
        return 1
    expect = None if args.expect_layers in ("all", "-2", "-1", "auto") else int(args.expect_layers)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as exc:
        print(f"gpu-gate: FAIL: cannot read {args.log}: {exc}", file=sys.stderr)
        return 1
    result = check_log(
        text,
        expect,
        device_prefix=args.device_prefix,
        min_gpu_buffer_mib=args.min_gpu_mib,
        rpc_endpoints=[e for e in args.rpc.split(",") if e],
    )
    if result.ok and args.wait_url and args.first_decode:
        try:
            key = read_api_key(args.api_key_file)
        except OSError as exc:
            print(f"gpu-gate: FAIL: cannot read {args.api_key_file}: {exc}", file=sys.stderr)
            return 1
        failure = first_decode(args.wait_url, key, args.decode_timeout)
        if failure:
            result.ok = False
            result.problems.append(failure)
    print(result.summary(), file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1
