"""Reusable Pulumi components that deploy large LLM servers on AMD hardware.

The package is lazy: `from components import LlamaCppVulkanServer` imports the llama.cpp
modules only, so a Kubernetes-only program never imports `pulumi_command`, and the payloads
(`components.payloads`) import no pulumi at all.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.k8s.network_policies import NetworkClient
    from components.llamacpp.flags import LlamaCppSpeculative, LlamaServerFlags
    from components.llamacpp.inputs import (
        HttpProbe,
        LlamaCppRpcWorkerArgs,
        LlamaCppRuntime,
        LlamaCppVulkanServerArgs,
        ServerProbes,
    )
    from components.llamacpp.rpc_worker import LlamaCppRpcWorker
    from components.llamacpp.server import LlamaCppVulkanServer
    from components.model_store.component import GgufModelStore
    from components.model_store.inputs import (
        DraftModel,
        GgufModelStoreArgs,
        ModelVolume,
        NodePreflight,
    )
    from components.monitoring.inputs import AlertThresholds, KubernetesMonitoring, ReferenceSpeeds
    from components.payloads.fetcher import ModelFile
    from components.vllm.component import VllmRocmServer
    from components.vllm.inputs import (
        CaddySite,
        HostMonitoring,
        HostRequirements,
        ModelLock,
        PatchOverlay,
        SpeculativeConfig,
        SshConnection,
        VllmFlags,
        VllmRocmServerArgs,
    )

_HOMES = {
    "AlertThresholds": "components.monitoring.inputs",
    "CaddySite": "components.vllm.inputs",
    "DraftModel": "components.model_store.inputs",
    "GgufModelStore": "components.model_store.component",
    "GgufModelStoreArgs": "components.model_store.inputs",
    "HostMonitoring": "components.vllm.inputs",
    "HostRequirements": "components.vllm.inputs",
    "HttpProbe": "components.llamacpp.inputs",
    "KubernetesMonitoring": "components.monitoring.inputs",
    "LlamaCppRpcWorker": "components.llamacpp.rpc_worker",
    "LlamaCppRpcWorkerArgs": "components.llamacpp.inputs",
    "LlamaCppRuntime": "components.llamacpp.inputs",
    "LlamaCppSpeculative": "components.llamacpp.flags",
    "LlamaCppVulkanServer": "components.llamacpp.server",
    "LlamaCppVulkanServerArgs": "components.llamacpp.inputs",
    "LlamaServerFlags": "components.llamacpp.flags",
    "ModelFile": "components.payloads.fetcher",
    "ModelLock": "components.vllm.inputs",
    "ModelVolume": "components.model_store.inputs",
    "NetworkClient": "components.k8s.network_policies",
    "NodePreflight": "components.model_store.inputs",
    "PatchOverlay": "components.vllm.inputs",
    "ReferenceSpeeds": "components.monitoring.inputs",
    "ServerProbes": "components.llamacpp.inputs",
    "SpeculativeConfig": "components.vllm.inputs",
    "SshConnection": "components.vllm.inputs",
    "VllmFlags": "components.vllm.inputs",
    "VllmRocmServer": "components.vllm.component",
    "VllmRocmServerArgs": "components.vllm.inputs",
}
"""Each public name and the module that defines it, imported on first use: the components and
every type their Args reach (tests/unit/test_public_names.py keeps it, `__all__` and the imports
above the same)."""

__all__ = [
    "AlertThresholds",
    "CaddySite",
    "DraftModel",
    "GgufModelStore",
    "GgufModelStoreArgs",
    "HostMonitoring",
    "HostRequirements",
    "HttpProbe",
    "KubernetesMonitoring",
    "LlamaCppRpcWorker",
    "LlamaCppRpcWorkerArgs",
    "LlamaCppRuntime",
    "LlamaCppSpeculative",
    "LlamaCppVulkanServer",
    "LlamaCppVulkanServerArgs",
    "LlamaServerFlags",
    "ModelFile",
    "ModelLock",
    "ModelVolume",
    "NetworkClient",
    "NodePreflight",
    "PatchOverlay",
    "ReferenceSpeeds",
    "ServerProbes",
    "SpeculativeConfig",
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
