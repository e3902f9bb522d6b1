"""Complete, valid inputs of every component (every optional section set), and a walk over
their string fields: what the hostile-input tests put their strings into.
"""

from __future__ import annotations

import copy
import functools
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

from pulumi.provider.experimental.util import camel_case

from components.llamacpp.inputs import LlamaCppRpcWorkerArgs, LlamaCppVulkanServerArgs
from components.llamacpp.rpc_worker import LlamaCppRpcWorker
from components.llamacpp.server import LlamaCppVulkanServer
from components.model_store.component import GgufModelStore
from components.model_store.inputs import GgufModelStoreArgs
from components.validation import known_type
from components.vllm.component import VllmRocmServer
from components.vllm.inputs import VllmRocmServerArgs
from tests.conftest import MODEL_VOLUME
from tests.support.vllm_samples import HOST_KEY, VLLM_IMAGE, sample_caddy, sample_flags

Path_ = tuple[str | int, ...]
FREE_TEXT = {"api_key", "hf_token", "private_key", "verify_expectations"}
"""Inputs that are data, not syntax: secrets and recorded expectations go into files."""


def _probe() -> dict[str, Any]:
    return {
        "path": "/health",
        "initial_delay_seconds": 0,
        "period_seconds": 10,
        "failure_threshold": 180,
        "timeout_seconds": 5,
    }


def llama_server() -> dict[str, Any]:
    """LlamaCppVulkanServer's inputs, every optional input set."""
    return {
        "namespace": "llm-infra",
        # A split model's head: the same RPC-enabled build as its workers'.
        "image": "registry.lan/llama.cpp:vulkan-rpc-b11434",
        "flags": {
            "model_path": "/models/Model-00001-of-00003.gguf",
            "alias": "deepseek-v4-flash",
            "host": "0.0.0.0",
            "port": 8080,
            "jinja": True,
            "gpu_layers": 40,
            "ctx_size": 65536,
            "parallel": 1,
            "cont_batching": True,
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
            "temperature": 0.6,
            "top_p": 0.95,
            "threads": 8,
            "cache_ram_mib": 1024,
            "log_verbosity": 4,
            "log_file": "/logs/llama-server.log",
            "rpc": ["ds-rpc-0.llm-infra.svc:50052"],
            "tensor_split": [0.5, 0.5],
            "metrics": True,
        },
        "model": dict(MODEL_VOLUME),
        "node_selector": {"kubernetes.io/hostname": "nucbox"},
        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "32Gi"}},
        "probes": {"startup": _probe(), "readiness": _probe(), "liveness": _probe()},
        "service_port": 8080,
        "gpu_device_path": "/dev/dri",
        "gpu_access": "privileged",
        "gpu_resource": "amd.com/gpu",
        "run_as_user": 10001,
        "supplemental_groups": [992],
        "api_key": "sk-test",
        "allowed_clients": [{"namespace": "litellm", "pod_labels": {"app": "litellm"}}],
        "gpu_gate": True,
        "verify_expectations": "{}",
        "verify_image": "python:3.12.8-slim-bookworm",
        "min_decode_tps": 5.0,
        "metrics": {
            "scrapers": [{"namespace": "monitoring"}],
            "monitor_kind": "ServiceMonitor",
            "scrape_interval_seconds": 30,
            "monitor_labels": {"release": "prometheus"},
            "rules": True,
            "dashboard": True,
            "dashboard_namespace": "monitoring",
            "alerts": {"stall_minutes": 10, "kv_cache_ratio": 0.9, "for_minutes": 5},
            "reference": {"decode_tps": 9.0, "aggregate_tps": {"8": 40.0}},
            "fetch_job_pattern": "models-fetch-[0-9a-f]{8}",
        },
        "extra_args": ["--n-cpu-moe", "2", "--tags", "test"],
    }


def model_store() -> dict[str, Any]:
    """GgufModelStore's inputs, every optional input set."""
    return {
        "namespace": "llm-infra",
        "repo": "unsloth/DeepSeek-V4-Flash-0731-GGUF",
        "revision": "main",
        "files": [
            {
                "path": f"UD-IQ1_M/Model-0000{i}-of-00003.gguf",
                "name": f"Model-0000{i}-of-00003.gguf",
                "size": 1000,
                "sha256": "a" * 64,
            }
            for i in (1, 2, 3)
        ],
        "volume_size": "120Gi",
        "storage_class": "local-path",
        "node_selector": {"kubernetes.io/hostname": "nucbox"},
        "fetch_image": "python:3.12.8-slim-bookworm",
        "retired_patterns": ["Qwen3*.gguf"],
        "parallel_downloads": 3,
        "fetch_timeout_seconds": 3600,
        "hf_endpoint": "https://hf-mirror.example.com",
        "hf_token": "hf_test",
        "network_policy": True,
        "run_as_user": 10001,
        "upgrade": "keep",
        "node_preflight": {
            "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
            "gpu_access": "privileged",
            "min_gpu_memory_gib": 90.0,
            "gpu_device_path": "/dev/dri",
        },
    }


def rpc_worker() -> dict[str, Any]:
    """LlamaCppRpcWorker's inputs, every optional input set."""
    return {
        "namespace": "llm-infra",
        "image": "registry.lan/llama.cpp:vulkan-rpc-b11434",
        "head": "ds",
        "head_pod_labels": {"app.kubernetes.io/instance": "ds"},
        "node_selector": {"kubernetes.io/hostname": "nucbox-2"},
        "resources": {"limits": {"memory": "4Gi"}},
        "binary": "/app/ggml-rpc-server",
        "port": 50052,
        "threads": 4,
        "gpu_device_path": "/dev/dri",
        "gpu_access": "privileged",
        "gpu_resource": "amd.com/gpu",
        "run_as_user": 10001,
        "supplemental_groups": [992],
    }


def vllm_server(base_dir: str = "/opt/llm", model_dir: str = "/srv/models/ds") -> dict[str, Any]:
    """VllmRocmServer's inputs, every optional input set (no patches: they are local files)."""
    return {
        "connection": {
            "host": "gpu.example.com",
            "user": "deploy",
            "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n",
            "port": 22,
            "host_key": HOST_KEY,
        },
        "model_dir": model_dir,
        "model_lock": {
            "repo": "deepseek-ai/DeepSeek-V4-Flash-0731",
            "revision": "0" * 40,
            "files": [
                {"path": "config.json", "name": "config.json", "size": 12, "sha256": "1" * 64}
            ],
        },
        "fetch_image": "python:3.12.11-slim",
        "image": VLLM_IMAGE,
        "flags": {
            **sample_flags(),
            "model": "/models/ds",
            "max_num_seqs": 8,
            "kv_cache_dtype": "fp8",
        },
        "caddy": sample_caddy(),
        "api_key": "sk-test",
        "requirements": {"min_free_disk_gib": 1, "min_ram_gib": 1},
        "base_dir": base_dir,
        "project_name": "llm",
        "startup_timeout_seconds": 600,
        "fetch_parallel": 3,
        "verify_expectations": "{}",
        "min_decode_tps": 5.0,
        "metrics": {
            "port": 9443,
            "allowed_cidrs": ["10.20.0.0/16"],
            "scrape_interval_seconds": 30,
            "gpu_exporter_image": "rocm/device-metrics-exporter:v1.3.0",
            "alerts": {"stall_minutes": 10},
            "reference": {"decode_tps": 30.0},
        },
        "extra_args": ["--enforce-eager", "--max-log-len", "200"],
    }


COMPONENTS: dict[str, tuple[type, type, Any]] = {
    "LlamaCppVulkanServer": (LlamaCppVulkanServer, LlamaCppVulkanServerArgs, llama_server),
    "GgufModelStore": (GgufModelStore, GgufModelStoreArgs, model_store),
    "LlamaCppRpcWorker": (LlamaCppRpcWorker, LlamaCppRpcWorkerArgs, rpc_worker),
    "VllmRocmServer": (VllmRocmServer, VllmRocmServerArgs, vllm_server),
}
"""Each component: its class, its Args type, and its complete valid inputs."""


@functools.cache
def _hints(typed_dict: Any) -> dict[str, Any]:
    """The type hints of an Args type (read once: every hostile case walks them)."""
    return typing.get_type_hints(typed_dict, include_extras=True)


def _bare(annotation: Any) -> Any:
    annotation = known_type(annotation)
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [m for m in typing.get_args(annotation) if m is not type(None)]
        return _bare(members[0]) if len(members) == 1 else annotation
    return annotation


def string_fields(args_type: Any, value: Any, prefix: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    """(path, kind) of every string the inputs hold: kind is `str`, `item` (of a list),
    `key` or `value` (of a dict); Literal (enum) fields count as strings too."""
    for key, hint in _hints(args_type).items():
        if key not in value:
            continue
        bare = _bare(hint)
        origin = typing.get_origin(bare)
        path = (*prefix, key)
        if bare is str or origin is Literal:
            yield path, "str"
        elif typing.is_typeddict(bare) or hasattr(bare, "__required_keys__"):
            yield from string_fields(bare, value[key], path)
        elif origin is list:
            item = _bare(typing.get_args(bare)[0])
            if item is str:
                yield path, "item"
            elif hasattr(item, "__required_keys__") and value[key]:
                yield from string_fields(item, value[key][0], (*path, 0))
        elif origin is dict:
            key_type, value_type = (_bare(a) for a in typing.get_args(bare))
            if key_type is str or typing.get_origin(key_type) is Literal:
                yield path, "key"
            if value_type is str:
                yield path, "value"
            elif typing.get_origin(value_type) is dict:
                # resources: {"limits": {"memory": "4Gi"}}: the inner dict's keys and values.
                inner = next(iter(value[key]))
                yield (*path, inner), "key"
                yield (*path, inner), "value"


def with_string(args: dict[str, Any], path: Path_, kind: str, text: str) -> dict[str, Any]:
    """A deep copy of the inputs with `text` at path (as the string, list item, key or value)."""
    edited = copy.deepcopy(args)
    node: Any = edited
    for part in path[:-1]:
        node = node[part]
    last = path[-1]
    if kind == "str":
        node[last] = text
        if last == "cidr":
            # A network client names a namespace or a network, not both.
            node.pop("namespace", None)
            node.pop("pod_labels", None)
    elif kind == "item":
        node[last] = [text, *node[last][1:]]
    elif kind == "key":
        node[last] = {text: next(iter(node[last].values()))}
    else:
        node[last] = dict.fromkeys(node[last], text)
    return edited


def wire_names(value: Any, annotation: Any) -> Any:
    """Inputs as the engine sends them: camelCase names of fields (dict keys stay as written)."""
    bare = _bare(annotation)
    if hasattr(bare, "__required_keys__") and isinstance(value, dict):
        hints = _hints(bare)
        return {
            camel_case(k): wire_names(v, hints.get(k, Any)) if k in hints else v
            for k, v in value.items()
        }
    if typing.get_origin(bare) is list and isinstance(value, list):
        (item,) = typing.get_args(bare)
        return [wire_names(v, item) for v in value]
    return value
