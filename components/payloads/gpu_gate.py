"""Acceleration gate: did llama-server really put the configured layers on a GPU?

Standard library only, so the same file can run as a check script in a stock ``python``
image (``python3 gpu_gate.py --log FILE --expect-layers N``), like the fetcher beside it.

What llama-server b11434 prints (from its source and a real CPU-build run):

* ``warning: no usable GPU found, --gpu-layers option will be ignored`` - a plain
  ``fprintf(stderr)`` while parsing ``-ngl``, at any verbosity and never into ``--log-file``;
* ``load_tensors: offloaded N/M layers to GPU`` (M = layers + 1, the output layer counts),
  ``load_tensors: offloading N repeating layers to GPU`` and
  ``load_tensors: <buffer> model buffer size = X MiB`` (``Vulkan0``, ``CPU_Mapped``, ...) - libllama
  INFO, which the server's logger maps to verbosity 4: they appear only with ``-lv 4`` or higher,
  and the offload lines are not printed at all by a build without a GPU backend;
* ``device_info:`` then ``  - Vulkan0 : <description> (T MiB, F MiB free)`` - also ``-lv 4``;
* ``ggml_vulkan: Found N Vulkan devices:`` and ``ggml_vulkan: 0 = <name> (<driver>) | uma: ...``
  - ggml DEBUG, ``-lv 5`` only; informative, never required.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

OFFLOADED_LINE = "load_tensors: offloaded N/M layers to GPU"
BUFFER_LINE = "load_tensors: <device> model buffer size = X MiB"
NO_GPU_WARNING = "no usable GPU found, --gpu-layers option will be ignored"
# Without these the log cannot prove anything; say so instead of guessing.
VERBOSITY_HINT = (
    "llama-server b11434 logs load_tensors lines only at verbosity >= 4: "
    "pass -lv 4 (or LLAMA_ARG_LOG_VERBOSITY=4)"
)

# "0.00.010.672 I load_tensors: ..." - timestamp and level letter are optional prefixes
# (--log-prefix/--log-timestamps), so they are stripped rather than required.
_PREFIX = re.compile(r"^(?:\d+\.\d+\.\d+\.\d+\s+)?(?:[IWEDT]\s+)?")
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
_REPEATING = re.compile(r"load_tensors: offloading (\d+) repeating layers to GPU")
_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([0-9.]+) MiB")
_DEVICE_INFO = re.compile(r"^\s+- (\S+)\s*: (.*) \((\d+) MiB, (\d+) MiB free\)")
_VK_DEVICE = re.compile(r"ggml_vulkan: (\d+) = (.*?) \((.*?)\) \| uma: (\d)")
_VK_FOUND = re.compile(r"ggml_vulkan: Found (\d+) Vulkan devices")
_VK_NONE = "ggml_vulkan: No devices found."
# Buffer types that live in host RAM: CPU, CPU_Mapped, CPU_REPACK, Vulkan_Host, CUDA_Host ...
_HOST_BUFFER = re.compile(r"^CPU|_Host$")


@dataclass
class LoadEvidence:
    """What a llama-server load log says about devices and offload."""

    offloaded: int | None = None
    offloadable: int | None = None
    repeating: int | None = None
    gpu_buffers_mib: dict[str, float] = field(default_factory=dict)
    host_buffers_mib: dict[str, float] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    vulkan_devices: list[str] = field(default_factory=list)
    vulkan_found: int | None = None
    no_gpu_warning: bool = False
    vulkan_no_devices: bool = False
    saw_load_tensors: bool = False


@dataclass
class GateResult:
    """Verdict of the gate: ``ok`` plus one line per problem and the evidence used."""

    ok: bool
    problems: list[str]
    evidence: LoadEvidence

    def summary(self) -> str:
        """One human-readable paragraph (first line: PASS/FAIL)."""
        ev = self.evidence
        head = "PASS" if self.ok else "FAIL"
        layers = (
            f"{ev.offloaded}/{ev.offloadable} layers on GPU"
            if ev.offloaded is not None
            else "offload line missing"
        )
        gpu = ", ".join(f"{k} {v:.2f} MiB" for k, v in ev.gpu_buffers_mib.items()) or "none"
        lines = [f"gpu-gate: {head}: {layers}; GPU model buffers: {gpu}"]
        lines += [f"gpu-gate:   - {p}" for p in self.problems]
        return "\n".join(lines)


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
    return _PREFIX.sub("", line.rstrip("\n"), count=1)


def parse_load_log(text: str) -> LoadEvidence:
    """Collect offload, buffer and device lines from a llama-server log."""
    ev = LoadEvidence()
    in_device_info = False
    for raw in text.splitlines():
        msg = _message(raw)
        if NO_GPU_WARNING in msg:
            ev.no_gpu_warning = True
        if _VK_NONE in msg:
            ev.vulkan_no_devices = True
        if "load_tensors:" in msg:
            ev.saw_load_tensors = True
        if m := _OFFLOADED.search(msg):
            ev.offloaded, ev.offloadable = int(m[1]), int(m[2])
        elif m := _REPEATING.search(msg):
            ev.repeating = int(m[1])
        elif m := _BUFFER.search(msg):
            target = ev.host_buffers_mib if _HOST_BUFFER.search(m[1]) else ev.gpu_buffers_mib
            target[m[1]] = target.get(m[1], 0.0) + float(m[2])
        elif m := _VK_FOUND.search(msg):
            ev.vulkan_found = int(m[1])
        elif m := _VK_DEVICE.search(msg):
            ev.vulkan_devices.append(f"{m[2]} ({m[3]}), uma={m[4]}")
        if "device_info:" in msg:
            in_device_info = True
            continue
        if in_device_info:
            if m := _DEVICE_INFO.search(msg.split("common_param:", 1)[-1]):
                ev.devices[m[1]] = m[2]
            else:
                in_device_info = False
    return ev


def evaluate(
    ev: LoadEvidence,
    expect_layers: int | None,
    *,
    device_prefix: str = "Vulkan",
    min_gpu_buffer_mib: float = 0.0,
) -> GateResult:
    """Decide from parsed evidence; ``expect_layers`` None means all layers (``-ngl all``)."""
    problems: list[str] = []
    if ev.no_gpu_warning:
        problems.append(
            f"llama-server printed 'warning: {NO_GPU_WARNING}': this build or container has "
            "no usable GPU backend (missing Vulkan driver/ICD, /dev/dri or render group)"
        )
    if ev.vulkan_no_devices:
        problems.append(f"llama-server printed '{_VK_NONE}'")
    if ev.offloaded is None or ev.offloadable is None:
        hint = "" if ev.saw_load_tensors else f" (no load_tensors line at all; {VERBOSITY_HINT})"
        problems.append(f"expected the line '{OFFLOADED_LINE}' and did not find it{hint}")
    else:
        wanted = ev.offloadable if expect_layers is None else min(expect_layers, ev.offloadable)
        if ev.offloaded < wanted:
            problems.append(
                f"only {ev.offloaded}/{ev.offloadable} layers offloaded, expected {wanted} "
                f"(configured {'all' if expect_layers is None else expect_layers})"
            )
    gpu = {k: v for k, v in ev.gpu_buffers_mib.items() if k.startswith(device_prefix)}
    if not ev.gpu_buffers_mib and not ev.host_buffers_mib:
        problems.append(f"expected '{BUFFER_LINE}' lines and found none ({VERBOSITY_HINT})")
    elif not gpu:
        found = ", ".join([*ev.gpu_buffers_mib, *ev.host_buffers_mib])
        problems.append(
            f"expected a '{device_prefix}<N> model buffer size' line; only found: {found}"
        )
    elif sum(gpu.values()) <= min_gpu_buffer_mib:
        problems.append(
            f"{device_prefix} model buffers total {sum(gpu.values()):.2f} MiB, "
            f"expected more than {min_gpu_buffer_mib:.2f} MiB"
        )
    return GateResult(ok=not problems, problems=problems, evidence=ev)


def check_log(
    text: str,
    expect_layers: int | None,
    *,
    device_prefix: str = "Vulkan",
    min_gpu_buffer_mib: float = 0.0,
) -> GateResult:
    """Parse and evaluate a llama-server log in one call."""
    return evaluate(
        parse_load_log(text),
        expect_layers,
        device_prefix=device_prefix,
        min_gpu_buffer_mib=min_gpu_buffer_mib,
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


def probe_shell(
    log_path: str,
    expect_layers: int,
    device_prefix: str = "Vulkan",
    health_url: str | None = None,
) -> str:
    """POSIX sh for an exec startupProbe in the server image (no python there): exit 0 = on GPU.

    Needs ``--log-file LOG_PATH -lv 4``. The CPU-fallback warning does not reach the log file,
    so a GPU-less container is caught by the offload line being absent or short instead.
    With ``health_url`` (e.g. ``http://127.0.0.1:8080``) it first requires ``/health`` 200 via
    curl, which the llama.cpp server images ship for their own healthcheck.
    """
    log = shlex.quote(log_path)
    health = ""
    if health_url:
        url = shlex.quote(health_url.rstrip("/") + "/health")
        health = (
            f"curl -fsS -o /dev/null --max-time 5 {url} || "
            '{ echo "gpu-gate: not healthy yet"; exit 1; }\n'
        )
    return health + (
        f"line=$(grep -o 'offloaded [0-9]*/[0-9]* layers to GPU' {log} 2>/dev/null | tail -n 1)\n"
        '[ -n "$line" ] || { echo "gpu-gate: no \'load_tensors: offloaded N/M layers to GPU\' '
        'line yet (need -lv 4)"; exit 1; }\n'
        "n=${line#offloaded }; n=${n%%/*}; m=${line#*/}; m=${m%% *}\n"
        f'want={int(expect_layers)}; [ "$want" -gt "$m" ] && want=$m\n'
        '[ "$n" -ge "$want" ] || { echo "gpu-gate: $n/$m layers on GPU, want $want"; exit 1; }\n'
        f"grep -q 'load_tensors: *{device_prefix}[0-9]* model buffer size' {log} || "
        f"{{ echo 'gpu-gate: no {device_prefix} model buffer line'; exit 1; }}\n"
        'echo "gpu-gate: PASS $n/$m layers on GPU"\n'
    )


def probe_command(
    log_path: str, expect_layers: int, health_url: str | None = None, device_prefix: str = "Vulkan"
) -> list[str]:
    """``exec.command`` for a Kubernetes probe running ``probe_shell``."""
    return ["sh", "-c", probe_shell(log_path, expect_layers, device_prefix, health_url)]


def check_script() -> str:
    """This module's source: a stdlib-only script for a stock python image (ConfigMap)."""
    with open(__file__, encoding="utf-8") as handle:
        return handle.read()


def add_options(parser: argparse.ArgumentParser) -> None:
    """The gate's options, for its own command line and `llm-infra gpu-gate`."""
    parser.add_argument("--log", required=True, help="llama-server log (stderr or --log-file)")
    parser.add_argument(
        "--expect-layers", default="all", help="configured -ngl (a number or 'all')"
    )
    parser.add_argument("--device-prefix", default="Vulkan")
    parser.add_argument("--min-gpu-mib", type=float, default=0.0)
    parser.add_argument("--wait-url", help="poll URL/health first, so the log is complete")
    parser.add_argument("--wait-timeout", type=float, default=3600.0)


def run(args: argparse.Namespace) -> int:
    """Check the log; 0 pass, 1 fail."""
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
        text, expect, device_prefix=args.device_prefix, min_gpu_buffer_mib=args.min_gpu_mib
    )
    print(result.summary(), file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    """CLI: ``gpu_gate.py --log FILE --expect-layers N [--wait-url URL]``; 0 pass, 1 fail."""
    parser = argparse.ArgumentParser(prog="gpu_gate.py", description=__doc__.splitlines()[0])
    add_options(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
