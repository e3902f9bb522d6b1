"""Reusable Pulumi components that deploy large LLM servers on AMD hardware."""

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
