"""Reusable Pulumi components that deploy large LLM servers on AMD hardware.

The package is lazy: `from components import LlamaCppVulkanServer` imports the llama.cpp
modules only, so a Kubernetes-only program never imports `pulumi_command`, and the payloads
(`components.payloads`) import no pulumi at all.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.llamacpp.manifests import HttpProbe, LlamaServerFlags, ServerProbes
    from components.llamacpp.rpc_worker import LlamaCppRpcWorker, LlamaCppRpcWorkerArgs
    from components.llamacpp.server import LlamaCppVulkanServer, LlamaCppVulkanServerArgs
    from components.model_store.component import GgufModelStore, GgufModelStoreArgs, ModelVolume
    from components.monitoring.manifests import KubernetesMonitoring
    from components.monitoring.queries import AlertThresholds, ReferenceSpeeds
    from components.payloads.fetcher import ModelFile
    from components.vllm.builders import PatchOverlay, VllmFlags
    from components.vllm.caddyfile import CaddySite
    from components.vllm.component import (
        ModelLock,
        SshConnection,
        VllmRocmServer,
        VllmRocmServerArgs,
    )
    from components.vllm.host_monitoring import HostMonitoring
    from components.vllm.host_scripts import HostRequirements

_HOMES = {
    "AlertThresholds": "components.monitoring.queries",
    "CaddySite": "components.vllm.caddyfile",
    "GgufModelStore": "components.model_store.component",
    "GgufModelStoreArgs": "components.model_store.component",
    "HostMonitoring": "components.vllm.host_monitoring",
    "HostRequirements": "components.vllm.host_scripts",
    "HttpProbe": "components.llamacpp.manifests",
    "KubernetesMonitoring": "components.monitoring.manifests",
    "LlamaCppRpcWorker": "components.llamacpp.rpc_worker",
    "LlamaCppRpcWorkerArgs": "components.llamacpp.rpc_worker",
    "LlamaCppVulkanServer": "components.llamacpp.server",
    "LlamaCppVulkanServerArgs": "components.llamacpp.server",
    "LlamaServerFlags": "components.llamacpp.manifests",
    "ModelFile": "components.payloads.fetcher",
    "ModelLock": "components.vllm.component",
    "ModelVolume": "components.model_store.component",
    "PatchOverlay": "components.vllm.builders",
    "ReferenceSpeeds": "components.monitoring.queries",
    "ServerProbes": "components.llamacpp.manifests",
    "SshConnection": "components.vllm.component",
    "VllmFlags": "components.vllm.builders",
    "VllmRocmServer": "components.vllm.component",
    "VllmRocmServerArgs": "components.vllm.component",
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
