"""Reusable Pulumi components that deploy large LLM servers on AMD hardware.

Names load on first use (PEP 562): the standard-library payloads under `components.payloads`
(the fetcher, verify, the GPU gate) import no pulumi, so their commands start at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.caddyfile import CaddySite
    from components.gguf_model_store import GgufModelStore, GgufModelStoreArgs, ModelVolume
    from components.host_monitoring import HostMonitoring
    from components.host_scripts import HostRequirements
    from components.llamacpp_manifests import HttpProbe, LlamaServerFlags, ServerProbes
    from components.llamacpp_rpc_worker import LlamaCppRpcWorker, LlamaCppRpcWorkerArgs
    from components.llamacpp_vulkan_server import LlamaCppVulkanServer, LlamaCppVulkanServerArgs
    from components.monitoring_manifests import KubernetesMonitoring
    from components.monitoring_queries import AlertThresholds, ReferenceSpeeds
    from components.payloads.fetcher import ModelFile
    from components.vllm_rocm_builders import PatchOverlay, VllmFlags
    from components.vllm_rocm_server import (
        ModelLock,
        SshConnection,
        VllmRocmServer,
        VllmRocmServerArgs,
    )

_HOMES = {
    "AlertThresholds": "components.monitoring_queries",
    "CaddySite": "components.caddyfile",
    "GgufModelStore": "components.gguf_model_store",
    "GgufModelStoreArgs": "components.gguf_model_store",
    "HostMonitoring": "components.host_monitoring",
    "HostRequirements": "components.host_scripts",
    "HttpProbe": "components.llamacpp_manifests",
    "KubernetesMonitoring": "components.monitoring_manifests",
    "LlamaCppRpcWorker": "components.llamacpp_rpc_worker",
    "LlamaCppRpcWorkerArgs": "components.llamacpp_rpc_worker",
    "LlamaCppVulkanServer": "components.llamacpp_vulkan_server",
    "LlamaCppVulkanServerArgs": "components.llamacpp_vulkan_server",
    "LlamaServerFlags": "components.llamacpp_manifests",
    "ModelFile": "components.payloads.fetcher",
    "ModelVolume": "components.gguf_model_store",
    "PatchOverlay": "components.vllm_rocm_builders",
    "ReferenceSpeeds": "components.monitoring_queries",
    "ServerProbes": "components.llamacpp_manifests",
    "ModelLock": "components.vllm_rocm_server",
    "SshConnection": "components.vllm_rocm_server",
    "VllmFlags": "components.vllm_rocm_builders",
    "VllmRocmServer": "components.vllm_rocm_server",
    "VllmRocmServerArgs": "components.vllm_rocm_server",
}
"""Each public name and the module that defines it."""

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
    """Import a public name's module when the name is first used."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
