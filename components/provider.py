"""What the component provider hosts, for other Pulumi languages (`provider/`)."""

from importlib import metadata

import pulumi

from components.gguf_model_store import GgufModelStore
from components.llamacpp_vulkan_server import LlamaCppVulkanServer
from components.vllm_rocm_server import VllmRocmServer

PACKAGE = "llm-infra"
COMPONENTS: list[type[pulumi.ComponentResource]] = [
    GgufModelStore,
    LlamaCppVulkanServer,
    VllmRocmServer,
]


def _version() -> str:
    try:
        return metadata.version("llm-infra")
    except metadata.PackageNotFoundError:
        return "0.0.0"


VERSION = _version()
