"""Security contexts: least privilege wherever the hardware allows it."""

from typing import Annotated, Any, Literal

from pydantic import Field

from components.images import parse_image

GpuAccess = Literal["privileged", "device-plugin"]
# Scratch space for the read-only root filesystem (Mesa's shader cache, Python's tempfiles).
SCRATCH_MOUNT = "/tmp"


def restricted_container(run_as_user: int) -> dict[str, Any]:
    """A container with no privileges at all: non-root, no capabilities, read-only root."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def gpu_container(access: str, run_as_user: int) -> dict[str, Any]:
    """The GPU server's security context for the chosen GPU access mode."""
    if access == "device-plugin":
        # The AMD device plugin hands the render node to the pod: nothing else is needed.
        return restricted_container(run_as_user)
    # Without a device plugin, privileged is the reliable way to reach /dev/dri on k3s; the
    # root filesystem can still be read-only.
    return {"privileged": True, "readOnlyRootFilesystem": True}


def restricted_pod(supplemental_groups: list[int] | None = None) -> dict[str, Any]:
    """Pod-level security context: RuntimeDefault seccomp, extra groups (the render group)."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if supplemental_groups:
        context["supplementalGroups"] = supplemental_groups
    return context


DRI_MOUNT = "/dev/dri"
DEFAULT_DRI_DEVICE = "/dev/dri"


def dri_mount() -> dict[str, Any]:
    """Mount of the host's DRM devices (privileged GPU access)."""
    return {"name": "dev-dri", "mountPath": DRI_MOUNT}


def dri_volume(device_path: str = DEFAULT_DRI_DEVICE) -> dict[str, Any]:
    """The host's DRM device folder as a hostPath volume (privileged GPU access)."""
    return {"name": "dev-dri", "hostPath": {"path": device_path, "type": "Directory"}}


KFD_DEVICE = "/dev/kfd"
"""ROCm's compute interface, shared by all GPUs of the node."""


def device_mounts(devices: tuple[str, ...]) -> list[dict[str, Any]]:
    """Mounts of the host devices a runtime opens (privileged GPU access), in its order."""
    return [
        dri_mount() if device == DRI_MOUNT else {"name": _volume_name(device), "mountPath": device}
        for device in devices
    ]


def device_volumes(
    devices: tuple[str, ...], dri_path: str = DEFAULT_DRI_DEVICE
) -> list[dict[str, Any]]:
    """The host devices a runtime opens as hostPath volumes: the DRM folder (at `dri_path` on
    the host) and character devices such as /dev/kfd."""
    return [
        dri_volume(dri_path)
        if device == DRI_MOUNT
        else {"name": _volume_name(device), "hostPath": {"path": device, "type": "CharDevice"}}
        for device in devices
    ]


def _volume_name(device: str) -> str:
    return device.strip("/").replace("/", "-")


def scratch_volume() -> dict[str, Any]:
    """A small emptyDir for what a read-only container still writes."""
    return {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}


def scratch_mount() -> dict[str, Any]:
    """Mount of the scratch volume."""
    return {"name": "scratch", "mountPath": SCRATCH_MOUNT}


def image_skips(image: str) -> list[tuple[str, str]]:
    """checkov findings a pinned build tag answers for itself (none for a digest)."""
    if parse_image(image).digest is not None:
        return []
    return [
        ("CKV_K8S_43", "pinned to a build or version tag; set a digest in the stack to pin bytes"),
        ("CKV_K8S_15", "a pinned tag never changes: IfNotPresent restarts without the registry"),
    ]


def privileged_skips(what: str = "Vulkan reaches /dev/dri") -> list[tuple[str, str]]:
    """checkov findings of `privileged` GPU access (the seed's mode), each explained by what the
    runtime reaches (`ROCm reaches /dev/kfd and /dev/dri`)."""
    return [
        (check, f"{what} only privileged without a device plugin; "
         "server.gpuAccess: device-plugin drops this")
        for check in ("CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37",
                      "CKV_K8S_40")
    ]  # fmt: skip


PRIVILEGED_SKIPS = privileged_skips()
"""checkov findings of `privileged` GPU access of the Vulkan runtime."""


def checkov_skips(skips: list[tuple[str, str]]) -> dict[str, str]:
    """checkov's skip annotations (`checkov.io/skipN: CHECK=reason`), in a stable order.

    One annotation per check (checkov reads one per check id): a check named twice keeps its
    first place and its last reason."""
    unique = {check: (check, reason) for check, reason in skips}.values()
    return {
        f"checkov.io/skip{i}": f"{check}={reason}" for i, (check, reason) in enumerate(unique, 1)
    }


# Above 10000: no clash with the node's own users (checkov CKV_K8S_40).
DEFAULT_UID = 10001
RunAsUser = Annotated[int, Field(ge=1, le=2**31 - 1)]
"""A non-root uid of a container."""
