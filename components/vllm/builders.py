"""Pure builders of VllmRocmServer: the vLLM argv, the compose project and the host's file layout.

Everything here is a function of validated, typed arguments (no Pulumi, no file reads), so it
is unit-tested directly and the contract tests run the same strings through vLLM's parser and
compose's schema. The Caddyfile is in `caddyfile.py`, the remote commands in `host_scripts.py`.
"""

import hashlib
import json
import posixpath
import re
from typing import Any, Literal, TypedDict

import yaml

from components.payloads import HTTP_POLICY_FILE
from components.payloads.fetcher import lock_digest
from components.vllm.caddyfile import MetricsSite
from components.vllm.inputs import CaddySite, PatchOverlay, VllmFlags

VLLM_SERVICE = "vllm"
CADDY_SERVICE = "caddy"

TlsMode = Literal["auto", "internal"]


class RemotePaths(TypedDict):
    """Where the deployment's files live on the host."""

    compose: str
    """The compose file."""
    caddyfile: str
    """The Caddyfile, bind-mounted into Caddy."""
    lock: str
    """The model lock the fetcher reads."""
    fetcher: str
    """The fetcher's source."""
    http_policy: str
    """The HTTP client policy the fetcher imports (beside it)."""
    env_file: str
    """The API key env file (mode 0600)."""
    patches_dir: str
    """Directory of the copied patch overlays."""


def sha256_text(text: str) -> str:
    """sha256 hex digest of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def remote_paths(base_dir: str) -> RemotePaths:
    """The host paths under base_dir."""
    return {
        "compose": posixpath.join(base_dir, "compose.yaml"),
        "caddyfile": posixpath.join(base_dir, "Caddyfile"),
        "lock": posixpath.join(base_dir, "model.lock.json"),
        "fetcher": posixpath.join(base_dir, "fetcher.py"),
        "http_policy": posixpath.join(base_dir, HTTP_POLICY_FILE),
        "env_file": posixpath.join(base_dir, "vllm.env"),
        "patches_dir": posixpath.join(base_dir, "patches"),
    }


def patch_remote_path(paths: RemotePaths, patch: PatchOverlay) -> str:
    """Host path of a patch copy, named by its hash so a new content is a new mount source."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", posixpath.basename(patch["source"]))
    return posixpath.join(paths["patches_dir"], f"{patch['sha256'][:12]}-{name}")


def vllm_address(flags: VllmFlags) -> str:
    """`host:port` of vLLM on the compose network: where Caddy and the checks reach it."""
    return f"{VLLM_SERVICE}:{flags['port']}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def vllm_serve_args(flags: VllmFlags) -> list[str]:
    """The full `vllm serve ...` argv (the API key is never here: it comes from the env file)."""
    argv = [
        "vllm",
        "serve",
        flags["model"],
        "--served-model-name",
        flags["served_model_name"],
        "--host",
        flags["host"],
        "--port",
        str(flags["port"]),
        "-tp",
        str(flags["tensor_parallel_size"]),
        "--max-model-len",
        str(flags["max_model_len"]),
        "--max-num-batched-tokens",
        str(flags["max_num_batched_tokens"]),
        "--kv-cache-memory-bytes",
        str(flags["kv_cache_memory_bytes"]),
        "--kv-offloading-size",
        _number(flags["kv_offloading_size_gib"]),
        "--kv-offloading-backend",
        flags["kv_offloading_backend"],
    ]
    if flags.get("max_num_seqs") is not None:
        argv += ["--max-num-seqs", str(flags.get("max_num_seqs"))]
    if flags.get("kv_cache_dtype"):
        argv += ["--kv-cache-dtype", str(flags.get("kv_cache_dtype"))]
    speculative = flags.get("speculative_config")
    if speculative:
        argv += ["--speculative-config", json.dumps(dict(speculative), separators=(",", ":"))]
    if flags.get("reasoning_parser"):
        argv += ["--reasoning-parser", str(flags.get("reasoning_parser"))]
    if flags.get("tool_call_parser"):
        argv += [
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            str(flags.get("tool_call_parser")),
        ]
    argv.append(
        "--enable-prefix-caching"
        if flags["enable_prefix_caching"]
        else "--no-enable-prefix-caching"
    )
    return argv


def compose_file(
    *,
    image: str,
    flags: VllmFlags,
    model_dir: str,
    paths: RemotePaths,
    patches: list[PatchOverlay],
    caddy: CaddySite,
    caddyfile_sha256: str,
    lock_sha256: str,
    startup_seconds: int,
    metrics: MetricsSite | None = None,
    gpu_exporter: tuple[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The compose project: vLLM on the compose network only, Caddy publishing 80/443 (and the
    metrics site's port); optionally the GPU exporter, `(service name, service)`."""
    argv = vllm_serve_args(flags)
    volumes: list[dict[str, Any]] = [
        {"type": "bind", "source": model_dir, "target": flags["model"], "read_only": True}
    ]
    for patch in patches:
        volumes.append(
            {
                "type": "bind",
                "source": patch_remote_path(paths, patch),
                "target": patch["target"],
                "read_only": True,
            }
        )
    health = f"http://127.0.0.1:{flags['port']}/health"
    vllm: dict[str, Any] = {
        "image": image,
        # Explicit, so the command below is right whatever entrypoint the pinned build has.
        "entrypoint": argv[:2],
        "command": argv[2:],
        "restart": "unless-stopped",
        "devices": ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"],
        "group_add": ["video"],
        "ipc": "host",
        "cap_add": ["SYS_PTRACE", "IPC_LOCK"],
        "security_opt": ["seccomp=unconfined"],
        # The CPU KV tier is pinned host memory.
        "ulimits": {"memlock": -1},
        "environment": {
            "VLLM_ROCM_USE_AITER": "1",
            # The weights are on the mounted volume; never reach for the hub at start.
            "HF_HUB_OFFLINE": "1",
        },
        "env_file": [paths["env_file"]],
        "volumes": volumes,
        "expose": [str(flags["port"])],
        "labels": {"llm-infra.model-lock-sha256": lock_sha256},
        "healthcheck": {
            # The image has python; a curl may not be there.
            "test": [
                "CMD",
                "python3",
                "-c",
                f"import urllib.request; urllib.request.urlopen('{health}', timeout=5)",
            ],
            "interval": "15s",
            "timeout": "10s",
            "retries": 3,
            # Loading 157 GiB and compiling kernels takes long; failures then do not count.
            "start_period": f"{startup_seconds}s",
        },
    }
    ports = ["80:80", "443:443", "443:443/udp"]
    if metrics is not None:
        ports.append(f"{metrics['port']}:{metrics['port']}")
    caddy_service: dict[str, Any] = {
        "image": caddy["image"],
        "restart": "unless-stopped",
        "ports": ports,
        "volumes": [
            {
                "type": "bind",
                "source": paths["caddyfile"],
                "target": "/etc/caddy/Caddyfile",
                "read_only": True,
            },
            {"type": "volume", "source": "caddy-data", "target": "/data"},
            {"type": "volume", "source": "caddy-config", "target": "/config"},
        ],
        # Caddy does not watch its file: a new hash changes the service, so `up` recreates it.
        "labels": {"llm-infra.caddyfile-sha256": caddyfile_sha256},
        "depends_on": {VLLM_SERVICE: {"condition": "service_started"}},
    }
    services = {VLLM_SERVICE: vllm, CADDY_SERVICE: caddy_service}
    if gpu_exporter is not None:
        services[gpu_exporter[0]] = gpu_exporter[1]
    return {
        "services": services,
        # Certificates survive `down`, so a redeploy does not hit ACME rate limits.
        "volumes": {"caddy-data": {}, "caddy-config": {}},
    }


def compose_yaml(document: dict[str, Any]) -> str:
    """The compose document as YAML text, keys in the order written."""
    return yaml.safe_dump(document, sort_keys=False, width=100)


def lock_json(lock: dict[str, Any]) -> str:
    """The lock document as the fetcher reads it."""
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def lock_sha256(lock: dict[str, Any]) -> str:
    """The lock's digest as the fetcher computes it (names its completion marker)."""
    return lock_digest(lock)
