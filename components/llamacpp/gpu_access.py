"""How a llama.cpp pod reaches its GPU: the runtime's devices, environment, security and skips.

Shared by the server (`manifests.py`) and the RPC worker (`rpc_manifests.py`).
"""

from collections.abc import Mapping
from typing import Any, Literal

from components.k8s.pod_security import (
    SCRATCH_MOUNT,
    device_mounts,
    device_volumes,
    gpu_container,
    privileged_skips,
    restricted_container,
)
from components.llamacpp.inputs import args_runtime

GpuMode = Literal["privileged", "device-plugin", "none"]
BACKEND_NAMES = {"vulkan": "Vulkan", "rocm": "ROCm", "cpu": "the CPU build"}


def gpu_mode(args: Mapping[str, Any]) -> GpuMode:
    """How a server's or worker's pod reaches its GPU: `privileged` (hostPath devices),
    `device-plugin` (the plugin's resource), or `none` (a runtime without a GPU)."""
    if not args_runtime(args).devices:
        return "none"
    mode: GpuMode = args["gpu_access"]
    return mode


def gpu_env(args: Mapping[str, Any]) -> list[dict[str, str]]:
    """HOME on the scratch volume (the root filesystem is read-only), then the runtime's own."""
    return [
        {"name": "HOME", "value": SCRATCH_MOUNT},
        *({"name": key, "value": value} for key, value in args_runtime(args).env),
    ]


def gpu_security(args: Mapping[str, Any]) -> dict[str, Any]:
    """The container's security context for its GPU mode (no GPU: no privileges at all)."""
    mode = gpu_mode(args)
    if mode == "none":
        return restricted_container(args["run_as_user"])
    return gpu_container(mode, args["run_as_user"])


def gpu_resources(args: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Container requests and limits, with the plugin's GPU in `device-plugin` mode."""
    resources = {kind: dict(values) for kind, values in args["resources"].items()}
    if gpu_mode(args) == "device-plugin":
        gpu = args["gpu_resource"]
        resources.setdefault("limits", {})[gpu] = "1"
        resources.setdefault("requests", {})[gpu] = "1"
    return resources


def gpu_mounts(args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Mounts of the runtime's host devices (privileged mode only)."""
    return device_mounts(args_runtime(args).devices) if gpu_mode(args) == "privileged" else []


def gpu_volumes(args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The runtime's host devices as hostPath volumes (privileged mode only)."""
    if gpu_mode(args) != "privileged":
        return []
    return device_volumes(args_runtime(args).devices, args["gpu_device_path"])


def gpu_skips(args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The checkov findings privileged GPU access accepts, explained by what it reaches."""
    if gpu_mode(args) != "privileged":
        return []
    runtime = args_runtime(args)
    return privileged_skips(
        f"{BACKEND_NAMES[runtime.backend]} reaches {' and '.join(runtime.devices)}"
    )
