"""Runtimes (components/llamacpp/runtimes.py): the built-ins, records, images, and what a stack
file, the plan and the gate make of them.

ROCm cannot run here (no AMD GPU): its gate is held against real Vulkan load logs whose device
names are rewritten to ROCm's (`ROCm0`, `ROCm_Host`), the names b11434's HIP backend logs.
"""

from __future__ import annotations

import copy
import gzip
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from components.llamacpp import gate
from components.llamacpp.runtimes import (
    BUILTIN_RUNTIMES,
    CUSTOM_IMAGE_CAPABILITIES,
    Runtime,
    official_backend,
    runtime_for,
    with_image,
)
from components.payloads import gpu_gate
from infra.config import ConfigError, parse_stack
from infra.plan.llamacpp import (
    compute_buffer_bytes,
    plan_llamacpp,
)
from infra.targets.registry import stack_plan
from tests.conftest import stack_values, strix, unlocked_source
from tests.support.plan_samples import VULKAN_MEASURED

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu_gate"
OFFICIAL = "ghcr.io/ggml-org/llama.cpp"
DIGEST = "sha256:" + "cd" * 32


def test_the_builtins_are_the_official_server_images_of_the_pinned_build() -> None:
    assert {name: r.image for name, r in BUILTIN_RUNTIMES.items()} == {
        "vulkan": f"{OFFICIAL}:server-vulkan-b11434",
        "rocm": f"{OFFICIAL}:server-rocm-b11434",
        "cpu": f"{OFFICIAL}:server-b11434",
    }
    vulkan, rocm, cpu = (BUILTIN_RUNTIMES[n] for n in ("vulkan", "rocm", "cpu"))
    assert (vulkan.devices, rocm.devices, cpu.devices) == (
        ("/dev/dri",),
        ("/dev/kfd", "/dev/dri"),
        (),
    )
    assert (vulkan.device_prefix, rocm.device_prefix, cpu.device_prefix) == ("Vulkan", "ROCm", None)
    assert (vulkan.compute_estimate, rocm.compute_estimate) == ("vulkan", "upper-bound")
    assert dict(vulkan.env) == {"MESA_SHADER_CACHE_DIR": "/tmp/mesa-shader-cache"}
    # gfx1151 is in the ROCm image's build targets: no HSA_OVERRIDE_GFX_VERSION.
    assert rocm.env == ()
    assert not any(r.capabilities for r in BUILTIN_RUNTIMES.values())


def test_a_runtime_round_trips_through_its_record_and_pins_its_digest() -> None:
    runtime = Runtime("my-build", "registry.lan/llama.cpp:vk-b11434", "vulkan",
                      frozenset({"rpc"}), DIGEST)  # fmt: skip
    record = runtime.to_record()
    assert record == {
        "name": "my-build",
        "image": "registry.lan/llama.cpp:vk-b11434",
        "backend": "vulkan",
        "capabilities": ["rpc"],
        "digest": DIGEST,
    }
    assert Runtime.from_record(record) == runtime
    assert runtime.pinned_image == f"registry.lan/llama.cpp:vk-b11434@{DIGEST}"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"backend": "metal"}, "backend: 'metal' is not one of vulkan, rocm, cpu"),
        ({"capabilities": ["rpc", "cuda"]}, "capabilities: ['rpc', 'cuda'] is not a list of rpc"),
        ({"image": "registry.lan/x:latest"}, "image: 'registry.lan/x:latest' names no build"),
        ({"digest": "sha256:beef"}, "digest: 'sha256:beef' is not sha256:<64 hex digits>"),
        ({"name": "My Build"}, "name: 'My Build' is not a name"),
        ({"extra": 1}, "extra: unknown key"),
        ({"capabilities": None}, "capabilities: None is not a list of rpc"),
    ],
)
def test_a_record_is_read_strictly_naming_the_field(change: dict[str, Any], message: str) -> None:
    record = {**BUILTIN_RUNTIMES["vulkan"].to_record(), **change}
    with pytest.raises(ValueError) as caught:
        Runtime.from_record(record)
    assert message in str(caught.value)


def test_a_record_needs_all_five_keys() -> None:
    record = BUILTIN_RUNTIMES["rocm"].to_record()
    del record["digest"]
    with pytest.raises(ValueError, match="digest: is required"):
        Runtime.from_record(record)


@pytest.mark.parametrize(
    ("image", "backend"),
    [
        (f"{OFFICIAL}:server-vulkan-b11434", "vulkan"),
        (f"{OFFICIAL}:full-vulkan-b11434", "vulkan"),
        (f"{OFFICIAL}:server-rocm-b11434", "rocm"),
        (f"{OFFICIAL}:server-b11434", "cpu"),
        (f"{OFFICIAL}:server", "cpu"),
        (f"{OFFICIAL}:server-cuda-b11434", ""),
        (f"{OFFICIAL}@{DIGEST}", None),
        ("registry.lan/llama.cpp:server-rocm-b11434", None),
    ],
)
def test_an_official_tag_names_its_backend(image: str, backend: str | None) -> None:
    assert official_backend(image) == backend


def test_server_image_replaces_a_builtins_image_within_its_backend_only() -> None:
    vulkan = BUILTIN_RUNTIMES["vulkan"]
    same, problem = with_image(vulkan, f"{OFFICIAL}:server-vulkan-b11500")
    assert problem is None and same.backend == "vulkan" and not same.capabilities
    custom, problem = with_image(vulkan, "registry.lan/llama.cpp:vulkan-rpc-b11434")
    assert problem is None and custom.capabilities == CUSTOM_IMAGE_CAPABILITIES
    _, problem = with_image(vulkan, f"{OFFICIAL}:server-rocm-b11434")
    assert problem is not None and "is llama.cpp's rocm build, but the runtime is 'vulkan'" in (
        problem
    )
    declared = Runtime("mine", "registry.lan/x:b11434", "rocm")
    _, problem = with_image(declared, "registry.lan/y:b11434")
    assert problem is not None and "a declared runtime names its own image" in problem


def test_without_a_named_runtime_an_official_tag_picks_its_builtin() -> None:
    runtime, decided, problem = runtime_for(f"{OFFICIAL}:server-rocm-b11434", None)
    assert (runtime, decided, problem) == (BUILTIN_RUNTIMES["rocm"], True, None)
    runtime, _, _ = runtime_for("registry.lan/llama.cpp:vulkan-rpc-b11434", None)
    assert runtime.backend == "vulkan" and "rpc" in runtime.capabilities


def problems_of(**server: Any) -> list[str]:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"].update(server)
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    return caught.value.problems


@pytest.mark.parametrize(
    ("server", "line"),
    [
        ({"runtime": "metal"},
         "server.runtime: 'metal': Input should be 'vulkan', 'rocm', 'cpu' or 'tuned'"),
        ({"runtime": {"name": "x", "image": "r.lan/x:b11434", "backend": "vulkan",
                      "capabilities": ["rpcx"]}},
         "server.runtime.capabilities[0]: 'rpcx': Input should be 'rpc'"),
        ({"runtime": "cpu"},
         "server.gpuLayers: 40 layers for a GPU, but server.runtime 'cpu' runs on the CPU only "
         "(llama-server ignores -ngl without a GPU backend): set 0"),
        ({"runtime": "rocm", "image": f"{OFFICIAL}:server-vulkan-b11434"},
         f"server.image: '{OFFICIAL}:server-vulkan-b11434' is llama.cpp's vulkan build, but the "
         "runtime is 'rocm' (rocm)"),
        ({"runtime": "tuned", "image": f"{OFFICIAL}:server-vulkan-b11434"},
         "server.image: set while server.runtime: tuned takes the image from the tune record"),
        ({"runtime": {"name": "x", "image": "r.lan/x:b11434", "backend": "rocm"},
          "image": "r.lan/y:b11434"},
         "server.image: 'r.lan/y:b11434' is not the image of runtime 'x' (r.lan/x:b11434)"),
        ({"runtime": {"name": "x", "image": "r.lan/x:latest", "backend": "rocm"}},
         "server.runtime.image: 'r.lan/x:latest' is a floating tag (pin a build tag such as "
         "server-vulkan-b11434, a full version, or a digest; or set server.allowFloatingImage"),
        ({"runtime": "cpu", "gpuLayers": 0, "gpuAccess": "device-plugin"},
         "server.gpuAccess: 'device-plugin' asks the node for a GPU, but server.runtime 'cpu' "
         "runs on the CPU only"),
        ({"image": f"{OFFICIAL}:server-cuda-b11434"},
         f"server.image: '{OFFICIAL}:server-cuda-b11434' is a llama.cpp build of a backend no "
         "runtime here runs (allowed: vulkan, rocm, cpu)"),
    ],
)  # fmt: skip
def test_a_stack_files_runtime_problem_names_its_key(server: dict[str, Any], line: str) -> None:
    problems = problems_of(**server)
    assert any(p.startswith(line) for p in problems), problems


def test_the_node_preflight_checks_a_vulkan_device_only() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"]["runtime"] = "rocm"
    values["store"]["nodePreflight"] = True
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    assert caught.value.problems == [
        "store.nodePreflight: checks a Vulkan device in the server image (llama-server "
        "--list-devices); the runtime 'rocm' (rocm) is not checked by it (set "
        "store.nodePreflight: false)"
    ]


def plan_of(gib: float | None = None, **server: Any) -> Any:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"].update(server)
    values["memory"].pop("computeGib")
    if gib is not None:
        values["memory"]["computeGib"] = gib
    stack = strix(values)
    return stack_plan(stack, unlocked_source(stack))


def test_a_rocm_plan_says_its_compute_buffers_are_the_upper_bound_not_a_measurement() -> None:
    rocm, vulkan = plan_of(runtime="rocm"), plan_of()
    (assumed,) = [a for a in rocm.assumptions if a.startswith("compute buffers:")]
    assert "no measured estimate for the runtime 'rocm'" in assumed
    assert "`sched_reserve: ROCm0 compute buffer size`" in assumed
    assert not any(a.startswith("compute buffers:") for a in vulkan.assumptions)
    assert any("llama-server's GPU is ROCm0" in n for n in rocm.notes)
    # A measured figure in the stack (memory.computeGib) is no assumption.
    assert not any(
        a.startswith("compute buffers:") for a in plan_of(runtime="rocm", gib=2).assumptions
    )


def test_a_rocm_plan_takes_the_upper_bound_where_vulkan_has_a_measurement() -> None:
    vulkan = plan_llamacpp(VULKAN_MEASURED).devices["vram"].items["compute"]
    rocm = plan_llamacpp(replace(VULKAN_MEASURED, runtime="rocm", gpu_device="ROCm0",
                                 compute_estimate="upper-bound"))  # fmt: skip
    shape = VULKAN_MEASURED.attention
    assert rocm.devices["vram"].items["compute"] == compute_buffer_bytes(shape, 65536, 512)
    assert rocm.devices["vram"].items["compute"] > vulkan


def test_a_cpu_plan_has_no_gpu_at_all() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"].update(runtime="cpu", gpuLayers=0)
    stack = strix(values)
    plan = stack_plan(stack, unlocked_source(stack))
    assert "vram" not in plan.devices
    assert plan.devices["ram"].items["weights"] > 80 * 2**30  # every layer on the host


def log(name: str) -> str:
    path = FIXTURES / name
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def probe(tmp_path: Path, text: str, prefix: str | None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "llama-server.log"
    path.write_text(text)
    script = gate.probe_shell(str(path), 40, prefix)
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def test_the_gate_of_a_rocm_runtime_reads_rocm_device_names(tmp_path: Path) -> None:
    rocm = log("llama43-gpu.load.log").replace("Vulkan0 model", "  ROCm0 model")
    rocm = rocm.replace("Vulkan_Host", "ROCm_Host")
    assert gpu_gate.check_log(rocm, 40, device_prefix="ROCm").ok
    assert probe(tmp_path, rocm, "ROCm").returncode == 0
    # A ROCm runtime's gate is not passed by Vulkan's buffers, nor Vulkan's by ROCm's.
    assert not gpu_gate.check_log(log("llama43-gpu.load.log"), 40, device_prefix="ROCm").ok
    assert probe(tmp_path, rocm, "Vulkan").returncode == 1


def test_the_gate_of_the_cpu_runtime_wants_every_layer_on_the_host(tmp_path: Path) -> None:
    # A real load with no GPU visible: exactly what the CPU build's load looks like.
    host = log("llama43-no-visible-devices.load.log")
    result = gpu_gate.check_log(host, 0, device_prefix=None)
    assert result.ok and result.summary().startswith("gpu-gate: PASS: every layer on the host")
    passed = probe(tmp_path, host, None)
    assert passed.returncode == 0 and passed.stdout.startswith("gpu-gate: PASS every layer on")
    gpu = log("llama43-gpu.load.log")
    result = gpu_gate.check_log(gpu, 0, device_prefix=None)
    assert result.problems == [
        "non-zero GPU model buffers (Vulkan0 547.05 MiB), where the runtime expects none"
    ]
    failed = probe(tmp_path, gpu, None)
    assert failed.returncode == 1
    assert "a non-zero GPU model buffer, where the runtime expects none" in failed.stdout
