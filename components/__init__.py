"""Reusable Pulumi components that deploy large LLM servers on AMD hardware.

The package is lazy: `from components import LlamaCppVulkanServer` imports the llama.cpp
modules only, so a Kubernetes-only program never imports `pulumi_command`, and the payloads
(`components.payloads`) import no pulumi at all.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.llamacpp.inputs import (
        HttpProbe,
        LlamaCppRpcWorkerArgs,
        LlamaCppRuntime,
        LlamaCppVulkanServerArgs,
        LlamaServerFlags,
        ServerProbes,
    )
    from components.llamacpp.rpc_worker import LlamaCppRpcWorker
    from components.llamacpp.server import LlamaCppVulkanServer
    from components.model_store.component import GgufModelStore
    from components.model_store.inputs import GgufModelStoreArgs, ModelVolume
    from components.monitoring.inputs import AlertThresholds, KubernetesMonitoring, ReferenceSpeeds
    from components.payloads.fetcher import ModelFile
    from components.vllm.component import VllmRocmServer
    from components.vllm.inputs import (
        CaddySite,
        HostMonitoring,
        HostRequirements,
        ModelLock,
        PatchOverlay,
        SshConnection,
        VllmFlags,
        VllmRocmServerArgs,
    )

_HOMES = {
    "AlertThresholds": "components.monitoring.inputs",
    "CaddySite": "components.vllm.inputs",
    "GgufModelStore": "components.model_store.component",
    "GgufModelStoreArgs": "components.model_store.inputs",
    "HostMonitoring": "components.vllm.inputs",
    "HostRequirements": "components.vllm.inputs",
    "HttpProbe": "components.llamacpp.inputs",
    "KubernetesMonitoring": "components.monitoring.inputs",
    "LlamaCppRpcWorker": "components.llamacpp.rpc_worker",
    "LlamaCppRpcWorkerArgs": "components.llamacpp.inputs",
    "LlamaCppRuntime": "components.llamacpp.inputs",
    "LlamaCppVulkanServer": "components.llamacpp.server",
    "LlamaCppVulkanServerArgs": "components.llamacpp.inputs",
    "LlamaServerFlags": "components.llamacpp.inputs",
    "ModelFile": "components.payloads.fetcher",
    "ModelLock": "components.vllm.inputs",
    "ModelVolume": "components.model_store.inputs",
    "PatchOverlay": "components.vllm.inputs",
    "ReferenceSpeeds": "components.monitoring.inputs",
    "ServerProbes": "components.llamacpp.inputs",
    "SshConnection": "components.vllm.inputs",
    "VllmFlags": "components.vllm.inputs",
    "VllmRocmServer": "components.vllm.component",
    "VllmRocmServerArgs": "components.vllm.inputs",
}
"""Each public name and the module that defines it, imported on first use."""

__all__ = [
    "AlertThresholds",
    "CaddySite",
    "GgufModelStore",
    "GgufModelStoreArgs",
    "HostMonitoring",
    "HostRequirements",
    "HttpProbe",
    "KubernetesMonitoring",
    "LlamaCppRpcWorker",
    "LlamaCppRpcWorkerArgs",
    "LlamaCppRuntime",
    "LlamaCppVulkanServer",
    "LlamaCppVulkanServerArgs",
    "LlamaServerFlags",
    "ModelFile",
    "ModelLock",
    "ModelVolume",
    "PatchOverlay",
    "ReferenceSpeeds",
    "ServerProbes",
    "SshConnection",
    "VllmFlags",
    "VllmRocmServer",
    "VllmRocmServerArgs",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'components' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
