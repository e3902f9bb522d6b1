"""`server.runtime`: each runtime renders its image, devices, environment and gate, under mocks.

ROCm cannot run here (no AMD GPU on these machines): what is held for it is what the program
renders (image, /dev/kfd and /dev/dri, the gate's `ROCm` device names), that the manifests pass
`kubernetes-validate` (tests/contract/test_kubernetes_validate.py), and that the gate reads
`ROCm0` buffers (tests/unit/test_runtimes.py). The CPU runtime's gate runs against the real CPU
build (tests/contract/test_gpu_gate.py).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components import LlamaCppRpcWorker, LlamaCppVulkanServer
from components.llamacpp.runtimes import BUILTIN_RUNTIMES
from components.validation import ComponentInputError
from infra import program
from infra.config import ConfigError
from infra.config.feeds import fed
from infra.render import run_program
from infra.targets.kubernetes import rpc_worker_args, server_args
from infra.targets.registry import stack_plan
from tests.conftest import ROOT, STACKS, stack_values, strix, unlocked_source
from tests.support.cli import run_cli
from tests.support.tune_records import written_record

SPLIT = "strix-halo-pair-split"
DIGEST = "sha256:" + "ab" * 32
MY_BUILD = {
    "name": "my-build",
    "image": "registry.lan/llama.cpp:rocm-b11434",
    "backend": "rocm",
    "capabilities": [],
}


def values(stack: str = "strix-halo", **server: Any) -> dict[str, Any]:
    found = copy.deepcopy(stack_values(stack))
    found["server"].update(server)
    return found


def cpu_values() -> dict[str, Any]:
    """strix-halo on the CPU build: no layer for a GPU, the whole model in the container."""
    found = values(runtime="cpu", gpuLayers=0)
    found["server"]["resources"]["limits"]["memory"] = "110Gi"
    return found


def config_of(stack_values_: dict[str, Any], lock_dir: Path | None = None) -> dict[str, str]:
    config = {
        f"llm-infra:{k}": v if isinstance(v, str) else json.dumps(v)
        for k, v in stack_values_.items()
    }
    if lock_dir is not None:
        config["llm-infra:lockFile"] = str(lock_dir / "strix-halo.lock.json")
    return config


def server_pod(found: dict[str, Any], lock_dir: Path | None = None) -> dict[str, Any]:
    """The server Deployment's pod spec, as the program renders it."""
    rendered = run_program(program.main, config_of(found, lock_dir), [], stack="strix-halo")
    (deployment,) = [
        m
        for m in rendered.manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == "deepseek-v4-flash-0731"
    ]
    return dict(deployment["spec"]["template"]["spec"])


def server_container(spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in spec["containers"] if c["name"] == "llama-server"]
    return dict(container)


def host_devices(spec: dict[str, Any]) -> dict[str, str]:
    """hostPath volumes: host path → type."""
    return {
        v["hostPath"]["path"]: v["hostPath"]["type"] for v in spec["volumes"] if "hostPath" in v
    }


OFFICIAL = "ghcr.io/ggml-org/llama.cpp"


@pytest.mark.parametrize(
    ("runtime", "image", "devices", "env", "gate"),
    [
        ("vulkan", f"{OFFICIAL}:server-vulkan-b11434", {"/dev/dri": "Directory"},
         {"MESA_SHADER_CACHE_DIR"}, "dev=Vulkan"),
        ("rocm", f"{OFFICIAL}:server-rocm-b11434",
         {"/dev/kfd": "CharDevice", "/dev/dri": "Directory"}, set(), "dev=ROCm"),
        ("cpu", f"{OFFICIAL}:server-b11434", {}, set(), "PASS every layer on the host"),
    ],
)  # fmt: skip
def test_each_builtin_runtime_renders_its_image_devices_env_and_gate(
    runtime: str, image: str, devices: dict[str, str], env: set[str], gate: str
) -> None:
    spec = server_pod(cpu_values() if runtime == "cpu" else values(runtime=runtime))
    container = server_container(spec)
    assert container["image"] == image
    assert host_devices(spec) == devices
    assert {m["mountPath"] for m in container["volumeMounts"]} >= set(devices)
    assert {e["name"] for e in container["env"]} == {"HOME", *env}
    probe = container["startupProbe"]["exec"]["command"][2]
    assert gate in probe
    security = container["securityContext"]
    if devices:
        assert security == {"privileged": True, "readOnlyRootFilesystem": True}
    else:
        # No device: no privileges at all, whatever server.gpuAccess says.
        assert security["privileged"] is False and security["runAsNonRoot"] is True
        assert "-ngl" in container["args"]
        assert container["args"][container["args"].index("-ngl") + 1] == "0"


def test_a_rocm_pod_with_the_device_plugin_requests_the_gpu_and_mounts_nothing() -> None:
    spec = server_pod(values(runtime="rocm", gpuAccess="device-plugin", renderGroupId=992))
    container = server_container(spec)
    assert host_devices(spec) == {}
    assert container["resources"]["limits"]["amd.com/gpu"] == "1"
    assert container["securityContext"]["runAsNonRoot"] is True
    # /dev/kfd and the render node are group `render`: its GID reaches the pod.
    assert spec["securityContext"]["supplementalGroups"] == [992]


def test_a_declared_runtime_renders_its_own_image_and_backend() -> None:
    spec = server_pod(values(runtime={**MY_BUILD, "digest": DIGEST}))
    container = server_container(spec)
    assert container["image"] == f"{MY_BUILD['image']}@{DIGEST}"
    assert host_devices(spec) == {"/dev/kfd": "CharDevice", "/dev/dri": "Directory"}
    assert "dev=ROCm" in container["startupProbe"]["exec"]["command"][2]


def tune_record(winner: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The record `llm-infra tune` writes when `winner` beats the official Vulkan runtime."""
    server = changes.pop("server", None)
    stack = changes.pop("stack", "strix-halo")
    record = written_record(
        winner, BUILTIN_RUNTIMES["vulkan"].to_record(), stack=stack, server=server
    )
    record.update(changes)
    return record


def test_tuned_renders_the_winner_of_the_tune_record_pinned_to_its_digest(tmp_path: Path) -> None:
    winner = {**BUILTIN_RUNTIMES["rocm"].to_record(), "digest": DIGEST}
    (tmp_path / "strix-halo.tune.json").write_text(json.dumps(tune_record(winner)))
    spec = server_pod(values(runtime="tuned"), lock_dir=tmp_path)
    container = server_container(spec)
    assert container["image"] == f"ghcr.io/ggml-org/llama.cpp:server-rocm-b11434@{DIGEST}"
    assert "/dev/kfd" in host_devices(spec)
    assert "dev=ROCm" in container["startupProbe"]["exec"]["command"][2]


def program_problems(found: dict[str, Any], stack: str, lock_dir: Path | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config_of(found, lock_dir), [], stack=stack)
    return "\n".join(caught.value.problems)


def test_a_tuned_winner_gets_the_checks_of_a_named_runtime(tmp_path: Path) -> None:
    # The split stack's head needs rpc; the official ROCm build the record names has none.
    winner = BUILTIN_RUNTIMES["rocm"].to_record()
    record = tune_record(winner, stack=SPLIT)
    (tmp_path / f"{SPLIT}.tune.json").write_text(json.dumps(record))
    found = values(SPLIT, runtime="tuned")
    del found["server"]["image"]
    config = config_of(found)
    config["llm-infra:lockFile"] = str(tmp_path / f"{SPLIT}.lock.json")
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config, [], stack=SPLIT)
    (problem,) = caught.value.problems
    assert problem.startswith(
        f"server.runtime: tuned (the winner 'rocm' of {tmp_path / f'{SPLIT}.tune.json'}): "
        "'rocm' (ghcr.io/ggml-org/llama.cpp:server-rocm-b11434) does not declare the 'rpc' "
        "capability"
    )


def test_a_declared_runtime_without_rpc_refuses_server_rpc_in_the_stack_files_words() -> None:
    found = values(SPLIT, runtime={**MY_BUILD, "backend": "vulkan"})
    del found["server"]["image"]
    problems = program_problems(found, SPLIT)
    assert problems == (
        "server.runtime: 'my-build' (registry.lan/llama.cpp:rocm-b11434) does not declare the "
        "'rpc' capability (llama.cpp's images are built without -DGGML_RPC and answer --rpc with "
        "'RPC not supported in this build'): declare a runtime of a build configured with "
        "-DGGML_RPC=ON, with capabilities: [rpc] (the head of a split model: server.rpc.workers)"
    )
    # Declared, it is accepted: checks go by what the runtime says, not by its image's name.
    found["server"]["runtime"]["capabilities"] = ["rpc"]
    run_program(program.main, config_of(found), [], stack=SPLIT)


def split_args(record: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """The split stack's head and worker args as its target builds them, with `record` as the
    runtime a Python program passes (and its image)."""
    stack = strix(stack_values(SPLIT))
    volume = {"claim_name": "m", "fetcher_config_map": "f", "check_image": "python:3.12.8",
              "run_as_user": 1}  # fmt: skip
    source = unlocked_source(stack)
    split = stack_plan(stack, source).tensor_split
    head: Any = copy.deepcopy(server_args(stack, fed(stack), source, volume, split))  # type: ignore[arg-type]
    workers: dict[str, Any] = copy.deepcopy(dict(rpc_worker_args(stack, fed(stack))))
    args: Any
    for args in (head, *workers.values()):
        args["runtime"] = record
        args["image"] = record["image"]
    return stack.server.resource_name, head, workers


def built(component: Callable[[], object]) -> Callable[[], None]:
    """A Python program that builds one component."""

    def program() -> None:
        component()

    return program


def test_a_python_program_passing_a_runtime_without_rpc_gets_the_same_refusal() -> None:
    name, head, workers = split_args(dict(MY_BUILD))
    with pytest.raises(ComponentInputError) as caught:
        run_program(built(lambda: LlamaCppVulkanServer(name, head)), {}, [], stack="test")
    text = str(caught.value)
    assert f"invalid inputs of LlamaCppVulkanServer {name!r}" in text
    assert (
        "runtime: 'my-build' (registry.lan/llama.cpp:rocm-b11434) does not declare the 'rpc'"
        in (text)
    )
    assert text.endswith("(the head of a split model: flags.rpc)")
    ((worker, args),) = workers.items()
    with pytest.raises(ComponentInputError) as caught:
        run_program(built(lambda: LlamaCppRpcWorker(worker, args)), {}, [], stack="test")
    assert "runtime: 'my-build' (registry.lan/llama.cpp:rocm-b11434) does not declare" in str(
        caught.value
    )


def test_a_python_worker_of_a_rocm_runtime_with_rpc_mounts_kfd() -> None:
    _, _, workers = split_args({**MY_BUILD, "capabilities": ["rpc"]})
    ((worker, args),) = workers.items()
    rendered = run_program(built(lambda: LlamaCppRpcWorker(worker, args)), {}, [], stack="t")
    (deployment,) = [m for m in rendered.manifests if m["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {v["hostPath"]["path"] for v in volumes if "hostPath" in v} == {"/dev/kfd", "/dev/dri"}


def test_render_of_a_tuned_stack_without_its_record_exits_2(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.strix-halo.yaml"
    stack.write_text(
        (STACKS / "Pulumi.strix-halo.yaml")
        .read_text()
        .replace("  llm-infra:server:\n", "  llm-infra:server:\n    runtime: tuned\n")
    )
    result = run_cli(["render", str(stack), "--out", str(tmp_path / "r")], cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"server.runtime: tuned: {tmp_path}/strix-halo.tune.json: no tune record (run: "
        "llm-infra tune strix-halo, and commit its record)"
    ) in result.stderr.splitlines()
    (tmp_path / "strix-halo.tune.json").write_text(
        json.dumps({**tune_record(BUILTIN_RUNTIMES["rocm"].to_record()), "version": 3})
    )
    result = run_cli(["render", str(stack), "--out", str(tmp_path / "r")], cwd=ROOT)
    assert result.returncode == 2
    assert (
        f"server.runtime: tuned: {tmp_path}/strix-halo.tune.json: version: 3 is not 1 (the "
        "format this build reads)"
    ) in result.stderr.splitlines()
