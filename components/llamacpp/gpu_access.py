"""How a llama.cpp pod reaches its GPU: the runtime's devices, environment, security and skips.

Shared by the server (`manifests.py`) and the RPC worker (`rpc_manifests.py`): each resolves
its pod's `PodGpu` once and reads every part of the pod it decides from that one value.
"""

from collections.abc import Mapping
from dataclasses import dataclass
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
from components.llamacpp.runtimes import Runtime

GpuMode = Literal["privileged", "device-plugin", "none"]
BACKEND_NAMES = {"vulkan": "Vulkan", "rocm": "ROCm", "cpu": "the CPU build"}


@dataclass(frozen=True)
class PodGpu:
    """What a server's or worker's pod needs for its GPU, from its args and runtime."""

    runtime: Runtime
    """What runs in the pod (its image, devices and device names)."""
    mode: GpuMode
    """`privileged` (hostPath devices), `device-plugin` (the plugin's resource), or `none`
    (a runtime without a GPU)."""
    env: list[dict[str, str]]
    """HOME on the scratch volume (the root filesystem is read-only), then the runtime's own."""
    security: dict[str, Any]
    """The container's security context for its GPU mode (no GPU: no privileges at all)."""
    resources: dict[str, dict[str, str]]
    """Container requests and limits, with the plugin's GPU in `device-plugin` mode."""
    mounts: list[dict[str, Any]]
    """Mounts of the runtime's host devices (privileged mode only)."""
    volumes: list[dict[str, Any]]
    """The runtime's host devices as hostPath volumes (privileged mode only)."""
    skips: list[tuple[str, str]]
    """The checkov findings privileged GPU access accepts, explained by what it reaches."""

    @property
    def image(self) -> str:
        """The image the pod runs."""
        return self.runtime.pinned_image


def pod_gpu(args: Mapping[str, Any]) -> PodGpu:
    """The GPU side of a validated server's or worker's pod, its runtime resolved once."""
    runtime = args_runtime(args)
    mode: GpuMode = args["gpu_access"] if runtime.devices else "none"
    privileged = mode == "privileged"
    return PodGpu(
        runtime=runtime,
        mode=mode,
        env=[
            {"name": "HOME", "value": SCRATCH_MOUNT},
            *({"name": key, "value": value} for key, value in runtime.env),
        ],
        security=restricted_container(args["run_as_user"])
        if mode == "none"
        else gpu_container(mode, args["run_as_user"]),
        resources=_resources(args, mode),
        mounts=device_mounts(runtime.devices) if privileged else [],
        volumes=device_volumes(runtime.devices, args["gpu_device_path"]) if privileged else [],
        skips=_privileged_skips(runtime) if privileged else [],
    )


def _resources(args: Mapping[str, Any], mode: GpuMode) -> dict[str, dict[str, str]]:
    resources = {kind: dict(values) for kind, values in args["resources"].items()}
    if mode == "device-plugin":
        gpu = args["gpu_resource"]
        resources.setdefault("limits", {})[gpu] = "1"
        resources.setdefault("requests", {})[gpu] = "1"
    return resources


def _privileged_skips(runtime: Runtime) -> list[tuple[str, str]]:
    return privileged_skips(
        f"{BACKEND_NAMES[runtime.backend]} reaches {' and '.join(runtime.devices)}"
    )
