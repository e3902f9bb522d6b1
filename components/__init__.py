"""Reusable Pulumi components that deploy large LLM servers on AMD hardware."""

from components.gguf_model_store import GgufModelStore, GgufModelStoreArgs, ModelFile, ModelVolume
from components.llamacpp_vulkan_server import (
    HttpProbe,
    LlamaCppVulkanServer,
    LlamaCppVulkanServerArgs,
    LlamaServerFlags,
    ServerProbes,
)

__all__ = [
    "GgufModelStore",
    "GgufModelStoreArgs",
    "HttpProbe",
    "LlamaCppVulkanServer",
    "LlamaCppVulkanServerArgs",
    "LlamaServerFlags",
    "ModelFile",
    "ModelVolume",
    "ServerProbes",
]
