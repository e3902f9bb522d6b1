"""The acceleration gate on the real llama-server b11434 CPU build: it must say "no GPU".

The CPU build is exactly the silent-fallback case: it boots, turns healthy and serves
with ``-ngl 40`` while every layer runs on the CPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from components.payloads import GPU_GATE_SOURCE, gpu_gate
from tests.support.llama_server import run_llama_server, tiny_server_argv
from tests.support.tiny_gguf import write_tiny_split_model

pytestmark = pytest.mark.contract


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_split_model(tmp_path_factory.mktemp("gate-model"), "tiny", 3)[0]


def test_cpu_build_at_lv4_is_reported_as_no_gpu(model: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with run_llama_server(tiny_server_argv(model, "-ngl", "40", "-lv", "4"), log_path=log):
        pass
    text = log.read_text()
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
    assert any("'load_tensors: offloaded N/M layers to GPU'" in p for p in result.problems)
    assert any("only found: CPU_Mapped" in p for p in result.problems)
    assert result.summary().startswith("gpu-gate: FAIL: offload line missing")


def test_cpu_build_at_default_verbosity_fails_and_asks_for_lv4(model: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with run_llama_server(tiny_server_argv(model, "-ngl", "40"), log_path=log):
        pass
    text = log.read_text()
    assert "load_tensors" not in text  # libllama INFO is verbosity 4 in b11434
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert any(gpu_gate.VERBOSITY_HINT in p for p in result.problems)


def test_log_file_misses_the_warning_but_the_gate_still_fails(model: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "llama.log"
    argv = tiny_server_argv(model, "-ngl", "40", "-lv", "4", "--log-file", str(log_file))
    with run_llama_server(argv, log_path=tmp_path / "stderr.log") as url:
        # As the stock-python-image check would run: wait for /health, then read the log.
        check = subprocess.run(
            [sys.executable, "-I", str(GPU_GATE_SOURCE), "--log", str(log_file),
             "--expect-layers", "40", "--wait-url", url, "--wait-timeout", "10"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        probe = subprocess.run(
            gpu_gate.probe_command(str(log_file), 40, health_url=url),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    down = subprocess.run(
        gpu_gate.probe_command(str(log_file), 40, health_url=url),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (down.returncode, down.stdout) == (1, "gpu-gate: not healthy yet\n")
    text = log_file.read_text()
    assert "load_tensors:   CPU_Mapped model buffer size" in text
    assert "no usable GPU found" not in text  # plain fprintf(stderr), never in --log-file
    assert "no usable GPU found" in (tmp_path / "stderr.log").read_text()
    assert check.returncode == 1, check.stdout + check.stderr
    assert "expected the line 'load_tensors: offloaded N/M layers to GPU'" in check.stderr
    assert probe.returncode == 1
    assert "no 'load_tensors: offloaded N/M layers to GPU' line" in probe.stdout
