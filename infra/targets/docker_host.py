"""Target `docker-host`: vLLM ROCm behind Caddy on one GPU host, over SSH (seed 002)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi

from components.payloads.fetcher import ModelFile
from components.validation import with_defaults
from components.vllm.builders import expected_models
from components.vllm.caddyfile import base_url
from components.vllm.component import VllmRocmServer
from components.vllm.inputs import (
    CaddySite,
    HostMonitoring,
    ModelLock,
    PatchOverlay,
    SshConnection,
    VllmFlags,
    VllmRocmServerArgs,
)
from infra.config import DockerHostStack, StackSecrets, project_root
from infra.config.inputs import stack_key
from infra.lock import ModelSource
from infra.targets.litellm import litellm_entry

MODELS_IN_CONTAINER = "/models"


def deploy(
    stack: DockerHostStack,
    source: ModelSource,
    secrets: StackSecrets,
    verify_expectations: str | None = None,
) -> None:
    """Create the stack's resources and export its outputs."""
    args = server_args(stack, source, secrets)
    args["verify_expectations"] = verify_expectations
    args["min_decode_tps"] = stack.server.min_decode_tps
    server = VllmRocmServer("vllm", args)
    pulumi.export("url", server.url)
    pulumi.export("servedModelName", server.served_model_name)
    pulumi.export("modelRevision", source.revision if source.locked else "unlocked")
    pulumi.export("litellmModel", server.url.apply(lambda url: litellm_route(stack, url)))


def litellm_route(stack: DockerHostStack, url: str) -> dict[str, Any]:
    """The LiteLLM entry of the public endpoint (Caddy always demands the API key)."""
    return litellm_entry(stack.server.served_model_name, url, api_key=True)


def caddy_site(stack: DockerHostStack) -> CaddySite:
    """The Caddy site of the stack, as VllmRocmServer takes it."""
    caddy = stack.caddy
    return {
        "site": caddy.site,
        "tls": caddy.tls,
        "allowed_cidrs": list(caddy.allowed_cidrs),
        "allow_world": caddy.allow_world,
        "image": caddy.image,
        "acme_email": caddy.acme_email,
    }


def endpoint_url(stack: DockerHostStack) -> str:
    """The public HTTPS base URL of the stack."""
    return base_url(caddy_site(stack))


def server_props(stack: DockerHostStack) -> dict[str, Any]:
    """What vLLM's `/v1/models` must report (vLLM has no /props): the host's props.json, from
    the same flags, named by the stack file's keys."""

    def key(path: str) -> str:
        return stack_key("VllmRocmServer", tuple(path.split(".")))

    return expected_models(vllm_flags(stack), key)


def vllm_flags(stack: DockerHostStack) -> VllmFlags:
    """`vllm serve` flags from the stack config."""
    server = stack.server
    flags: VllmFlags = {
        "model": f"{MODELS_IN_CONTAINER}/{Path(stack.host.model_dir).name}",
        "served_model_name": server.served_model_name,
        "host": "0.0.0.0",
        "port": server.port,
        "tensor_parallel_size": server.tensor_parallel_size,
        "max_model_len": server.max_model_len,
        "max_num_batched_tokens": server.max_num_batched_tokens,
        "kv_cache_memory_bytes": server.kv_cache_memory_bytes,
        "kv_offloading_size_gib": server.kv_offloading_size,
        "kv_offloading_backend": server.kv_offloading_backend,
        "enable_prefix_caching": server.prefix_caching,
        "reasoning_parser": server.reasoning_parser,
        "tool_call_parser": server.tool_call_parser,
        "max_num_seqs": server.max_num_seqs,
        "kv_cache_dtype": server.kv_cache_dtype,
    }
    if server.speculative is not None:
        flags["speculative_config"] = {
            "method": server.speculative.method,
            "num_speculative_tokens": server.speculative.num_speculative_tokens,
        }
    return flags


def server_args(
    stack: DockerHostStack, source: ModelSource, secrets: StackSecrets
) -> VllmRocmServerArgs:
    """VllmRocmServer inputs from the stack config, the lock and the secrets."""
    host = stack.host
    if secrets.ssh_private_key is None or secrets.api_key is None:
        raise ValueError("docker-host stacks need the sshPrivateKey and apiKey secrets")
    files: list[ModelFile] = list(source.files)
    lock: ModelLock = {"repo": stack.model.repo, "revision": source.revision, "files": files}
    if not source.locked and not files:
        lock["unresolved_patterns"] = list(stack.model.files)
    root = project_root()
    patches: list[PatchOverlay] = [
        {"source": str(root / p.source), "target": p.target, "sha256": p.sha256}
        for p in stack.patches
    ]
    connection: SshConnection = {
        "host": host.address,
        "user": host.user,
        "port": host.port,
        "private_key": secrets.ssh_private_key,
        "host_key": host.host_key,
    }
    if host.insecure_ignore_host_key:
        # The component warns that the host key goes unchecked.
        connection["insecure_ignore_host_key"] = True
    args: VllmRocmServerArgs = {
        "connection": connection,
        "model_dir": host.model_dir,
        "model_lock": lock,
        "fetch_image": stack.fetch_image,
        "image": stack.server.image,
        "flags": vllm_flags(stack),
        "caddy": caddy_site(stack),
        "api_key": secrets.api_key,
        "requirements": {
            "min_free_disk_gib": host.min_free_disk_gib,
            "min_ram_gib": host.min_ram_gib,
        },
        "base_dir": host.base_dir,
        "patches": patches,
        "startup_timeout_seconds": stack.server.startup_timeout_seconds,
        "metrics": monitoring(stack),
    }
    if stack.server.extra_args:
        args["extra_args"] = list(stack.server.extra_args)
    return with_defaults(args, VllmRocmServerArgs)


def monitoring(stack: DockerHostStack) -> HostMonitoring | None:
    """The metrics site, the GPU exporter and the alert thresholds (None: no metrics)."""
    metrics = stack.metrics
    if metrics is None:
        return None
    return {
        "port": metrics.port,
        "allowed_cidrs": list(metrics.allowed_cidrs),
        "allow_world": metrics.allow_world,
        "scrape_interval_seconds": metrics.scrape_interval_seconds,
        "gpu_exporter_image": metrics.gpu_exporter.image if metrics.gpu_exporter else None,
        "alerts": metrics.alerts.thresholds(),
        "reference": metrics.reference.speeds(),
    }
