"""The acceleration gate on synthetic b11434 Vulkan logs (lines built from its format strings)."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from pathlib import Path

import pytest

from components.payloads import gpu_gate

# ggml-vulkan.cpp: "ggml_vulkan: Found %zu Vulkan devices:\n" and
# "ggml_vulkan: %zu = %s (%s) | uma: %d | fp16: %s | bf16: %d | fp4: %d | warp size: %zu |
#  shared memory: %d | int dot: %d | matrix cores: %s\n" (GGML_LOG_DEBUG, -lv 5).
# common.cpp: "  - %-8s: %s (%zu MiB, %zu MiB free)\n" under "device_info:" (-lv 4).
# llama-model.cpp: "%s: offloading output layer to GPU\n", "%s: offloading %d repeating layers
# to GPU\n", "%s: offloaded %d/%d layers to GPU\n", "%s: %12s model buffer size = %8.2f MiB\n".
VULKAN_LOG = """\
ggml_vulkan: Found 1 Vulkan devices:
ggml_vulkan: 0 = Radeon 8060S Graphics (RADV GFX1151) (radv) | uma: 1 | fp16: 1 | bf16: 0 | \
fp4: 0 | warp size: 64 | shared memory: 65536 | int dot: 1 | matrix cores: KHR_coopmat
0.00.004.142 I cmn  common_param: common_params_print_info: build 11434 (abcdef0) with GNU 13
0.00.004.169 I cmn  common_param: device_info:
0.00.004.198 I cmn  common_param:   - {dev:<8}: Radeon 8060S Graphics (RADV GFX1151) \
(98304 MiB, 97000 MiB free)
0.00.004.315 I cmn  common_param: system_info: n_threads = 16
0.00.010.292 I load_tensors: loading model tensors, this can take a while... (load_mode = none)
0.00.010.300 I load_tensors: offloading output layer to GPU
0.00.010.301 I load_tensors: offloading {rep} repeating layers to GPU
0.00.010.302 I load_tensors: offloaded {n}/44 layers to GPU
0.00.010.672 I load_tensors: {dev:>12} model buffer size = 88123.45 MiB
0.00.010.673 I load_tensors: {host:>12} model buffer size =   412.00 MiB
"""


def vulkan_log(n: int = 43, dev: str = "Vulkan0", host: str = "CPU_Mapped") -> str:
    return VULKAN_LOG.format(n=n, rep=max(n - 1, 0), dev=dev, host=host)


def test_full_offload_passes() -> None:
    result = gpu_gate.check_log(vulkan_log(43), 43)
    assert result.ok, result.summary()
    ev = result.evidence
    assert (ev.offloaded, ev.offloadable, ev.repeating) == (43, 44, 42)
    assert ev.gpu_buffers_mib == {"Vulkan0": 88123.45}
    assert ev.host_buffers_mib == {"CPU_Mapped": 412.0}
    assert ev.devices == {"Vulkan0": "Radeon 8060S Graphics (RADV GFX1151)"}
    assert ev.vulkan_found == 1
    assert ev.vulkan_devices == ["Radeon 8060S Graphics (RADV GFX1151) (radv), uma=1"]
    assert result.summary().startswith("gpu-gate: PASS: 43/44 layers on GPU")


def test_all_layers_means_every_offloadable_layer() -> None:
    assert gpu_gate.check_log(vulkan_log(44), None).ok
    result = gpu_gate.check_log(vulkan_log(43), None)
    assert not result.ok
    assert "only 43/44 layers offloaded, expected 44 (configured all)" in result.problems[0]


def test_more_layers_than_the_model_has_is_capped() -> None:
    assert gpu_gate.check_log(vulkan_log(44), 999).ok


def test_partial_offload_fails() -> None:
    result = gpu_gate.check_log(vulkan_log(20), 43)
    assert not result.ok
    assert result.problems == ["only 20/44 layers offloaded, expected 43 (configured 43)"]


def test_weights_in_host_buffers_only_fail() -> None:
    text = vulkan_log(43).replace("     Vulkan0 model", "         CPU model")
    result = gpu_gate.check_log(text, 43)
    assert not result.ok
    assert (
        "expected a 'Vulkan<N> model buffer size' line; only found: CPU, CPU_Mapped"
        in (result.problems[0])
    )


def test_vulkan_host_buffer_is_not_gpu_memory() -> None:
    text = vulkan_log(43).replace("     Vulkan0 model", " Vulkan_Host model")
    assert not gpu_gate.check_log(text, 43).ok


@pytest.mark.parametrize(
    "reworded",
    [
        "0.00.010.302 I load_tensors: offloaded 43 of 44 layers to the GPU",
        "0.00.010.302 I load_tensors: 43/44 layers on device Vulkan0",
        "",
    ],
)
def test_a_reworded_or_dropped_offload_line_fails_loudly(reworded: str) -> None:
    text = vulkan_log(43).replace("0.00.010.302 I load_tensors: offloaded 43/44 layers to GPU",
                                  reworded)  # fmt: skip
    result = gpu_gate.check_log(text, 43)
    assert not result.ok
    assert result.problems == [
        "expected the line 'load_tensors: offloaded N/M layers to GPU' and did not find it"
    ]


def test_a_reworded_buffer_line_fails_loudly() -> None:
    text = vulkan_log(43).replace("model buffer size", "weights buffer")
    result = gpu_gate.check_log(text, 43)
    assert result.problems == [
        "expected 'load_tensors: <device> model buffer size = X MiB' lines and found none "
        f"({gpu_gate.VERBOSITY_HINT})"
    ]


def test_a_log_without_load_tensors_lines_points_at_the_verbosity() -> None:
    result = gpu_gate.check_log("0.00.002.923 I srv  llama_server: initializing ...\n", 43)
    assert not result.ok
    assert "pass -lv 4" in result.problems[0]


def test_no_gpu_warning_fails_even_with_offload_lines() -> None:
    text = "warning: no usable GPU found, --gpu-layers option will be ignored\n" + vulkan_log()
    result = gpu_gate.check_log(text, 43)
    assert not result.ok
    assert "no usable GPU found" in result.problems[0]


def test_vulkan_no_devices_fails() -> None:
    result = gpu_gate.check_log("ggml_vulkan: No devices found.\n" + vulkan_log(), 43)
    assert result.problems == ["llama-server printed 'ggml_vulkan: No devices found.'"]


def test_jsonl_log_format() -> None:
    # --log-jsonl: {"type":"log","time":...,"level":...,"msg":...} per line, no text prefix.
    records = [
        {"type": "log", "time": 1, "level": "I", "msg": gpu_gate._PREFIX.sub("", line) + "\n"}
        for line in vulkan_log(43).splitlines()
    ]
    records.append({"type": "fit_memory_breakdown", "unit": "MiB", "rows": []})
    assert gpu_gate.check_log("\n".join(json.dumps(r) for r in records), 43).ok


def test_other_device_prefix() -> None:
    text = vulkan_log(43, dev="ROCm0")
    assert not gpu_gate.check_log(text, 43).ok
    assert gpu_gate.check_log(text, 43, device_prefix="ROCm").ok


def test_min_gpu_buffer() -> None:
    assert not gpu_gate.check_log(vulkan_log(43), 43, min_gpu_buffer_mib=90_000).ok


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text(vulkan_log(43))
    assert gpu_gate.main(["--log", str(log), "--expect-layers", "43"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert gpu_gate.main(["--log", str(log), "--expect-layers", "all"]) == 1
    assert gpu_gate.main(["--log", str(tmp_path / "missing.log"), "--expect-layers", "1"]) == 1
    assert "cannot read" in capsys.readouterr().err


def run_probe(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def test_probe_shell(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(vulkan_log(43))
    ok = run_probe(gpu_gate.probe_shell(str(log), 43))
    assert (ok.returncode, ok.stdout) == (0, "gpu-gate: PASS 43/44 layers on GPU\n"), ok.stderr
    assert run_probe(gpu_gate.probe_shell(str(log), 44)).returncode == 1
    log.write_text(vulkan_log(44))
    # -ngl 99 on a 43-layer model: capped at the 44 offloadable layers, as llama.cpp does.
    assert run_probe(gpu_gate.probe_shell(str(log), 99)).returncode == 0
    log.write_text(vulkan_log(20))
    assert "20/44 layers on GPU, want 43" in run_probe(gpu_gate.probe_shell(str(log), 43)).stdout
    log.write_text(vulkan_log(43, dev="   CPU"))
    assert run_probe(gpu_gate.probe_shell(str(log), 43)).returncode == 1
    log.write_text("")
    assert "need -lv 4" in run_probe(gpu_gate.probe_shell(str(log), 43)).stdout
    assert run_probe(gpu_gate.probe_shell(str(tmp_path / "nope"), 43)).returncode == 1


def test_check_script_is_this_module() -> None:
    script = gpu_gate.check_script()
    compile(script, "gpu_gate.py", "exec")
    assert "def main(" in script
    # Stock python image: nothing outside the standard library.
    imports = {
        line.split()[1].split(".")[0]
        for line in script.splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imports <= {
        "__future__", "argparse", "json", "re", "shlex", "sys", "time", "urllib", "dataclasses",
    }  # fmt: skip


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, *args: object) -> None:
        pass


def test_probe_command_checks_health_first(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(vulkan_log(43))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        command = gpu_gate.probe_command(str(log), 43, health_url=url)
        assert command[:2] == ["sh", "-c"]
        ok = subprocess.run(command, capture_output=True, text=True, check=False)
        assert ok.returncode == 0, ok.stdout + ok.stderr
    finally:
        server.shutdown()
    down = subprocess.run(command, capture_output=True, text=True, check=False)
    assert (down.returncode, down.stdout) == (1, "gpu-gate: not healthy yet\n")
