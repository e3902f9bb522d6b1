"""The acceleration gate on real llama-server b11434 Vulkan load logs (tests/fixtures/gpu_gate).

The fixtures are the load logs the pod's wrapper kept, from the rendered strix-halo argv run on
an NVIDIA H200 through the Vulkan build (bench/gpu_run.py; provenance in the fixtures' README):
a 43-layer model at the rendered ``-ngl 40`` and llama.cpp's tiny deepseek4, on the GPU and in
each simulated fallback. Both the Python check and the probe's shell must decide each one.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.llamacpp import gate
from components.payloads import gate_decode, gpu_gate
from infra.cli import main as llm_infra
from tests.support.gate_server import crash_at_first_decode_server

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu_gate"


def fixture(name: str) -> str:
    path = FIXTURES / name
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode()
    return path.read_text()


def run_probe(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def probe_on(tmp_path: Path, text: str, layers: int) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "llama-server.log"
    log.write_text(text)
    return run_probe(gate.probe_shell(str(log), layers))


GPU = fixture("llama43-gpu.load.log")


def test_real_vulkan_load_passes(tmp_path: Path) -> None:
    result = gpu_gate.check_log(GPU, 40)
    assert result.ok, result.summary()
    ev = result.evidence
    assert (ev.offloaded, ev.offloadable, ev.repeating) == (40, 44, 39)
    assert ev.gpu_buffers_mib == {"Vulkan0": 547.05}
    assert ev.host_buffers_mib == {"CPU_Mapped": 56.77}
    assert ev.devices == {"Vulkan0": "NVIDIA H200", "CPU": "Intel(R) Xeon(R) Processor"}
    assert (ev.verbosity, ev.load_finished, ev.loads) == (4, True, 1)
    assert result.summary().startswith("gpu-gate: PASS: 40/44 layers on GPU")
    probe = probe_on(tmp_path, GPU, 40)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert probe.stdout.startswith("gpu-gate: PASS 40/44 layers on GPU (seen: devices Vulkan0 ")


def test_the_wrapper_kept_the_load_only() -> None:
    # The load log ends at the line the wrapper's reader stops at.
    assert (
        GPU.rstrip("\n")
        .splitlines()[-1]
        .endswith("llama_server: listening on http://0.0.0.0:56191")
    )


def test_deepseek4_passes_with_all_its_layers(tmp_path: Path) -> None:
    text = fixture("deepseek4-gpu.load.log")
    result = gpu_gate.check_log(text, 40)  # -ngl 40 on a 4-layer model: capped at 5
    assert result.ok, result.summary()
    assert (result.evidence.offloaded, result.evidence.offloadable) == (5, 5)
    assert gpu_gate.check_log(text, None).ok
    assert probe_on(tmp_path, text, 40).returncode == 0


@pytest.mark.parametrize(
    "name",
    [
        "llama43-no-visible-devices.load.log",  # GGML_VK_VISIBLE_DEVICES=""
        "llama43-driver-hidden.load.log",  # VK_DRIVER_FILES pointing nowhere
        "llama43-vulkan-disabled-env.load.log",  # GGML_DISABLE_VULKAN=1 (on an H100)
        "deepseek4-driver-hidden.load.log",
    ],
)
def test_no_gpu_after_a_finished_load_says_what_and_why(name: str, tmp_path: Path) -> None:
    text = fixture(name)
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    ev = result.evidence
    assert ev.offloaded is None and not ev.gpu_buffers_mib and ev.load_finished
    assert ev.devices.keys() == {"CPU"}
    first = result.problems[0]
    assert "after a finished load: no GPU was used" in first
    assert "/dev/dri" in first and "render group" in first and "Vulkan driver" in first
    assert "need -lv 4" not in result.summary() and "pass -lv 4" not in result.summary()
    assert "seen: devices CPU (Intel(R) Xeon(R) Processor); no offload line" in result.summary()
    probe = probe_on(tmp_path, text, 40)
    assert probe.returncode == 1
    assert probe.stdout.startswith("gpu-gate: FAIL: no GPU used: ")
    assert "seen: devices CPU (Intel(R) Xeon(R) Processor); no offload line; model buffers " \
        "CPU_Mapped" in probe.stdout  # fmt: skip
    assert "/dev/dri" in probe.stdout and "render group" in probe.stdout
    assert "-lv 4" not in probe.stdout


def test_ngl_0_on_a_real_gpu_fails_on_layers(tmp_path: Path) -> None:
    result = gpu_gate.check_log(fixture("llama43-ngl-0.load.log"), 40)
    assert not result.ok
    assert result.problems[0].startswith("only 0/44 layers offloaded, expected 40 (configured 40)")
    assert "memory fit" in result.problems[0]
    probe = probe_on(tmp_path, fixture("llama43-ngl-0.load.log"), 40)
    assert probe.returncode == 1
    assert probe.stdout.startswith(
        "gpu-gate: FAIL: 0/44 layers on GPU, want 40 (seen: devices Vulkan0"
    )


@pytest.mark.parametrize("name", ["llama43-gpu-lv5.load.log.gz", "deepseek4-gpu-lv5.load.log.gz"])
def test_lv5_dry_run_is_not_the_load(name: str, tmp_path: Path) -> None:
    text = fixture(name)
    # The memory fit's dry run (load_mode = none) logs zero-size Vulkan buffers first.
    assert "Vulkan0 model buffer size =     0.00 MiB" in text
    assert "ggml_vulkan:" not in text  # b11434 prints none at -lv 5 either
    result = gpu_gate.check_log(text, 40)
    assert result.ok, result.summary()
    assert result.evidence.loads == 2 and result.evidence.gpu_buffers_mib["Vulkan0"] > 0
    assert probe_on(tmp_path, text, 40).returncode == 0
    # The dry run alone, then a finished start: zero-size buffers are never evidence.
    lines = text.splitlines()
    second = [i for i, line in enumerate(lines) if "loading model tensors" in line][1]
    dry = "\n".join([*lines[:second], "0.00.300.000 I srv  llama_server: model loaded"]) + "\n"
    dry_result = gpu_gate.check_log(dry, 40)
    assert not dry_result.ok
    assert any("only zero-size ones" in p for p in dry_result.problems), dry_result.problems
    probe = probe_on(tmp_path, dry, 40)
    assert probe.returncode == 1
    assert "no non-zero Vulkan model buffer" in probe.stdout


def test_a_zero_size_vulkan_buffer_in_the_only_load_fails() -> None:
    text = GPU.replace(
        "Vulkan0 model buffer size =   547.05 MiB", "Vulkan0 model buffer size =     0.00 MiB"
    )
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert "only zero-size ones" in result.problems[0]


def test_more_layers_than_the_model_has_is_capped(tmp_path: Path) -> None:
    assert not gpu_gate.check_log(GPU, None).ok  # all = 44, 40 on the GPU
    assert probe_on(tmp_path, GPU, 41).returncode == 1
    assert "want 41" in probe_on(tmp_path, GPU, 41).stdout


def test_vulkan_host_buffer_is_not_gpu_memory() -> None:
    text = GPU.replace("     Vulkan0 model", " Vulkan_Host model")
    assert not gpu_gate.check_log(text, 40).ok


@pytest.mark.parametrize(
    "reworded",
    [
        "0.00.238.704 I load_tensors: offloaded 40 of 44 layers to the GPU",
        "0.00.238.704 I load_tensors: 40/44 layers on device Vulkan0",
        "",
    ],
)
def test_a_reworded_or_dropped_offload_line_fails_loudly(reworded: str, tmp_path: Path) -> None:
    text = GPU.replace("0.00.238.704 I load_tensors: offloaded 40/44 layers to GPU", reworded)
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert result.problems[0].startswith(
        "no 'load_tensors: offloaded N/M layers to GPU' line after a finished load"
    )
    assert probe_on(tmp_path, text, 40).returncode == 1


def test_a_reworded_buffer_line_fails_loudly() -> None:
    text = GPU.replace("model buffer size", "weights buffer")
    result = gpu_gate.check_log(text, 40)
    assert result.problems == [
        "expected 'load_tensors: <device> model buffer size = X MiB' lines and found none "
        f"({gpu_gate.VERBOSITY_HINT})"
    ]


def test_a_log_below_lv4_says_so(tmp_path: Path) -> None:
    text = (
        "0.00.004.463 I cmn  common_param: common_params_print_info: verbosity = 3 (adjust with "
        "the `-lv N` CLI arg)\n0.00.033.655 I srv  llama_server: model loaded\n"
    )
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert "the log is at verbosity 3" in result.problems[0]
    assert "pass -lv 4" in result.problems[0]
    probe = probe_on(tmp_path, text, 40)
    assert probe.returncode == 1 and "below -lv 4" in probe.stdout


def test_a_log_still_loading_says_so(tmp_path: Path) -> None:
    head = "\n".join(GPU.splitlines()[:20]) + "\n"  # device_info, the fit, no load_tensors yet
    result = gpu_gate.check_log(head, 40)
    assert not result.ok
    assert "still loading" in result.problems[0]
    probe = probe_on(tmp_path, head, 40)
    assert probe.returncode == 1 and "still loading" in probe.stdout
    assert "FAIL" not in probe.stdout


def test_ggml_disable_vulkan_is_caught_by_what_the_static_build_does_print() -> None:
    # b11434 logs "Vulkan backend disabled by GGML_DISABLE_VULKAN ..." at debug level while the
    # backend registry starts (ggml/src/ggml-backend-reg.cpp:134), before llama-server's log
    # settings apply: the H100 capture at -lv 4 holds no line naming the variable. The console's
    # no-GPU warning and the load log's missing offload line are what the gate sees.
    load = fixture("llama43-vulkan-disabled-env.load.log")
    console = fixture("llama43-vulkan-disabled-env.console.log")
    assert "GGML_DISABLE_VULKAN" not in load + console
    assert console.startswith("warning: no usable GPU found, --gpu-layers option will be ignored")
    result = gpu_gate.check_log(console + "\n" + load, 40)
    assert not result.ok
    assert "no usable GPU found" in result.problems[0]
    assert any("no GPU was used" in problem for problem in result.problems)


def test_no_gpu_warning_fails_even_with_offload_lines() -> None:
    text = "warning: no usable GPU found, --gpu-layers option will be ignored\n" + GPU
    result = gpu_gate.check_log(text, 40)
    assert not result.ok
    assert "no usable GPU found" in result.problems[0]
    assert "/dev/dri" in result.problems[0]


def test_jsonl_log_format() -> None:
    # --log-jsonl: {"type":"log","time":...,"level":...,"msg":...} per line, no text prefix.
    records = [
        {"type": "log", "time": 1, "level": "I", "msg": gpu_gate._PREFIX.sub("", line) + "\n"}
        for line in GPU.splitlines()
    ]
    records.append({"type": "fit_memory_breakdown", "unit": "MiB", "rows": []})
    assert gpu_gate.check_log("\n".join(json.dumps(r) for r in records), 40).ok


def test_other_device_prefix() -> None:
    text = GPU.replace("Vulkan0 model", "  ROCm0 model")
    assert not gpu_gate.check_log(text, 40).ok
    assert gpu_gate.check_log(text, 40, device_prefix="ROCm").ok


def test_min_gpu_buffer() -> None:
    assert not gpu_gate.check_log(GPU, 40, min_gpu_buffer_mib=600).ok
    assert gpu_gate.check_log(GPU, 40, min_gpu_buffer_mib=500).ok


def test_the_gpu_gate_command_passes_the_gpu_load_and_fails_the_fallback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "server.log"
    log.write_text(GPU)
    assert llm_infra(["gpu-gate", "--log", str(log), "--expect-layers", "40"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert llm_infra(["gpu-gate", "--log", str(log), "--expect-layers", "all"]) == 1
    log.write_text(fixture("llama43-no-visible-devices.load.log"))
    assert llm_infra(["gpu-gate", "--log", str(log), "--expect-layers", "40"]) == 1
    err = capsys.readouterr().err
    assert "seen: devices CPU" in err and "no GPU was used" in err
    missing = str(tmp_path / "missing.log")
    assert llm_infra(["gpu-gate", "--log", missing, "--expect-layers", "1"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_probe_without_a_log(tmp_path: Path) -> None:
    probe = run_probe(gate.probe_shell(str(tmp_path / "nope"), 40))
    assert probe.returncode == 1 and "no load log at" in probe.stdout


class _Loaded(http.server.BaseHTTPRequestHandler):
    """A loaded llama-server's answers: /health 200; POST /completion per ``status``, with the
    API key ``key`` when it is set (llama-server answers 401 without it)."""

    status = 200
    key: str | None = None

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        auth = self.headers.get("Authorization")
        status = self.status
        if self.key is not None and auth != f"Bearer {self.key}":
            status = 401
        if self.path != gate_decode.DECODE_PATH or '"n_predict": 1' not in body:
            status = 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'{"content":"x","tokens_predicted":1}')

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def loaded_server(status: int = 200, key: str | None = None) -> Iterator[str]:
    handler = type("Handler", (_Loaded,), {"status": status, "key": key})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_command(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def test_probe_command_checks_health_first_and_the_first_decode_last(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(GPU)
    with loaded_server() as url:
        command = gate.probe_command(str(log), 40, health_url=url)
        assert command[:2] == ["sh", "-c"]
        ok = run_command(command)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.startswith("gpu-gate: PASS 40/44 layers on GPU")
    down = run_command(command)
    assert down.returncode == 1
    assert down.stdout == "gpu-gate: not healthy yet (the model is still loading)\n"


def test_a_crash_at_the_first_decode_fails_the_probe_and_the_python_check(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(GPU)
    with crash_at_first_decode_server() as url:
        probe = run_command(gate.probe_command(str(log), 40, health_url=url))
        failure = gate_decode.first_decode(url)
    expected = gate_decode.decode_failure("dropped")
    assert failure == expected
    assert probe.returncode == 1 and probe.stdout == f"gpu-gate: FAIL: {expected}\n"
    assert expected.startswith("the first decode (POST /completion, n_predict 1) failed: ")
    assert "ggml-org/llama.cpp#29028" in expected and "another runtime or build" in expected


def test_a_server_gone_before_the_first_decode_is_named(tmp_path: Path) -> None:
    with crash_at_first_decode_server() as url:
        pass  # shut down: nothing listens on its port any more
    assert gate_decode.first_decode(url) == gate_decode.decode_failure("refused")
    log = tmp_path / "server.log"
    log.write_text(GPU)
    script = gate.first_decode_shell(url)
    probe = run_command(["sh", "-c", script])
    assert probe.stdout == f"gpu-gate: FAIL: {gate_decode.decode_failure('refused')}\n"


@pytest.mark.parametrize(("status", "kind"), [(500, "server-error"), (404, "rejected")])
def test_a_non_200_first_decode_fails_alike(status: int, kind: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(GPU)
    with loaded_server(status) as url:
        probe = run_command(gate.probe_command(str(log), 40, health_url=url))
        failure = gate_decode.first_decode(url)
    assert failure == gate_decode.decode_failure(kind, str(status))
    assert probe.stdout == f"gpu-gate: FAIL: {failure}\n"


def test_the_first_decode_sends_the_api_key_from_its_file_never_in_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-gate-0123456789"
    key_file = tmp_path / "api-key"
    key_file.write_text(f"# llama-server --api-key-file\n\n{secret}\nsecond-key\n")
    log = tmp_path / "server.log"
    log.write_text(GPU)
    with loaded_server(key=secret) as url:
        command = gate.probe_command(str(log), 40, health_url=url, api_key_file=str(key_file))
        assert secret not in " ".join(command)
        ok = run_command(command)
        assert ok.returncode == 0, ok.stdout
        without = run_command(gate.probe_command(str(log), 40, health_url=url))
        assert gate_decode.first_decode(url, gate_decode.read_api_key(str(key_file))) is None
        monkeypatch.setenv(gate_decode.API_KEY_ENV, secret)
        assert gate_decode.first_decode(url, gate_decode.read_api_key(None)) is None
        monkeypatch.delenv(gate_decode.API_KEY_ENV)
        refused = gate_decode.first_decode(url, gate_decode.read_api_key(None))
    assert refused == gate_decode.decode_failure("unauthorized", "401")
    assert without.stdout == f"gpu-gate: FAIL: {refused}\n"


def test_the_gpu_gate_command_fails_at_the_first_decode_unless_told_not_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "server.log"
    log.write_text(GPU)
    args = ["gpu-gate", "--log", str(log), "--expect-layers", "40", "--wait-timeout", "5"]
    with crash_at_first_decode_server() as url:
        assert llm_infra([*args, "--wait-url", url]) == 1
        err = capsys.readouterr().err
        assert f"gpu-gate:   - {gate_decode.decode_failure('dropped')}" in err
        assert llm_infra([*args, "--wait-url", url, "--no-first-decode"]) == 0
    with loaded_server() as url:
        assert llm_infra([*args, "--wait-url", url]) == 0


def test_server_command_hands_the_args_to_llama_server(tmp_path: Path) -> None:
    # A stand-in binary that prints its argv: --log-file LOG becomes the FIFO, nothing else moves.
    # It writes one line to the FIFO as llama-server would; the reader copies it into LOG.
    fake = tmp_path / "llama-server"
    fake.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@"\n'
        'for a; do case $a in *.fifo) echo "I srv  llama_server: listening on http://x" > "$a";; '
        "esac; done\n"
    )
    fake.chmod(0o755)
    log = str(tmp_path / "llama-server.log")
    command = gate.server_command(log, str(fake))
    assert command[0:2] == ["sh", "-c"] and command[3] == "llama-server"
    args = ["-m", "/models/a b.gguf", "--log-file", log, "--alias", "x;y", "-lv", "4"]
    out = subprocess.run([*command, *args], capture_output=True, text=True, check=True, timeout=10)
    fifo = str(tmp_path / ".llama-server-log.fifo")
    assert out.stdout.splitlines() == ["-m", "/models/a b.gguf", "--log-file", fifo,
                                       "--alias", "x;y", "-lv", "4"]  # fmt: skip
    assert Path(log).read_text() == "I srv  llama_server: listening on http://x\n"


def test_a_split_model_passes_only_with_a_model_buffer_on_every_rpc_worker(
    tmp_path: Path,
) -> None:
    # The Vulkan head's real load, with the line b11434 prints for each rpc-server's share
    # (`RPC<n>[host:port] model buffer size`, as the loopback split contract logs it).
    workers = ["w0.llm.svc:50052", "w1.llm.svc:50052"]
    vulkan = "0.00.238.716 I load_tensors:      Vulkan0 model buffer size =   547.05 MiB"
    assert vulkan in GPU
    rpc_lines = [
        f"0.00.238.716 I load_tensors: RPC0[{worker}] model buffer size =   {mib} MiB"
        for worker, mib in zip(workers, ("120.50", "0.00"), strict=True)
    ]
    split = GPU.replace(vulkan, "\n".join([vulkan, *rpc_lines]))
    log = tmp_path / "llama-server.log"
    log.write_text(split)
    result = gpu_gate.check_log(split, 40, rpc_endpoints=workers)
    assert not result.ok
    assert any("RPC device w1.llm.svc:50052" in p for p in result.problems), result.problems
    probe = run_probe(gate.probe_shell(str(log), 40, rpc_endpoints=workers))
    assert probe.returncode == 1
    assert "no non-zero model buffer on the RPC device w1.llm.svc:50052" in probe.stdout
    log.write_text(split.replace("=   0.00 MiB", "=   64.25 MiB"))
    assert gpu_gate.check_log(log.read_text(), 40, rpc_endpoints=workers).ok
    probe = run_probe(gate.probe_shell(str(log), 40, rpc_endpoints=workers))
    assert probe.returncode == 0, probe.stdout
