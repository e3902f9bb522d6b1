"""The example program: a model store and a llama.cpp Vulkan server for one small GGUF.

With a lock file beside it (`llm-infra lock`'s format), the store fetches exactly the locked
files and verifies each one's sha256; without one, it fetches the file unpinned (and warns).
"""

from pathlib import Path

import pulumi

from components import GgufModelStore, LlamaCppVulkanServer, ModelFile
from infra.component_users import store_files_from_lock

NAMESPACE = "llm"
NODE = {"kubernetes.io/arch": "amd64", "hardware": "high-memory"}
MODEL = "Qwen3-8B-Q4_K_M.gguf"
LOCK = Path(__file__).with_name("qwen3-8b.lock.json")


def model_files(lock: Path) -> list[ModelFile]:
    """The locked files when there is a lock, else the model file by name."""
    if lock.exists():
        return store_files_from_lock(lock)
    return [{"path": MODEL, "name": MODEL}]


def main(lock: Path = LOCK) -> None:
    """Create the store and the server; export the URL."""
    files = model_files(lock)
    store = GgufModelStore(
        "models",
        {
            "namespace": NAMESPACE,
            "repo": "unsloth/Qwen3-8B-GGUF",
            "files": files,
            "volume_size": "20Gi",
            "node_selector": NODE,
        },
    )
    server = LlamaCppVulkanServer(
        "qwen3-8b",
        {
            "namespace": NAMESPACE,
            "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
            "flags": {
                "model_path": f"/models/{files[0]['name']}",
                "alias": "qwen3-8b",
                "gpu_layers": 37,
                "ctx_size": 32768,
                "parallel": 2,
                "cache_type_k": "q8_0",
                "cache_type_v": "q8_0",
                "temperature": 0.6,
                "top_p": 0.95,
                "threads": 4,
            },
            "model": store.model_volume,
            "node_selector": NODE,
            "resources": {
                "requests": {"cpu": "500m", "memory": "2Gi"},
                "limits": {"cpu": "2000m", "memory": "8Gi"},
            },
            # A small model loads in seconds: a shorter startup window than the default's.
            "probes": {
                "startup": {
                    "initial_delay_seconds": 10,
                    "period_seconds": 10,
                    "failure_threshold": 60,
                },
                "readiness": {
                    "initial_delay_seconds": 5,
                    "period_seconds": 10,
                    "failure_threshold": 3,
                },
            },
        },
        opts=pulumi.ResourceOptions(depends_on=[store]),
    )
    pulumi.export("url", server.url)
