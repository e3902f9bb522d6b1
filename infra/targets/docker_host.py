"""Target `docker-host`: vLLM ROCm behind Caddy on one GPU host, over SSH (seed 002)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pulumi

from components.payloads.fetcher import ModelFile
from components.validation import with_defaults
from components.vllm.builders import expected_models
from components.vllm.caddyfile import base_url
from components.vllm.component import VllmRocmServer
from components.vllm.inputs import (
    CaddySite,
    HostMonitoring,
    HostRequirements,
    ModelLock,
    PatchOverlay,
    SshConnection,
    VllmFlags,
    VllmRocmServerArgs,
)
from infra.config import DockerHostStack, StackSecrets, project_root
from infra.config.feeds import fed
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
    return cast(CaddySite, fed(stack.caddy, CaddySite))


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
    return cast(
        VllmFlags,
        {
            "model": f"{MODELS_IN_CONTAINER}/{Path(stack.host.model_dir).name}",
            "host": "0.0.0.0",
            **fed(stack.server, VllmFlags),
        },
    )


def server_args(
    stack: DockerHostStack, source: ModelSource, secrets: StackSecrets
) -> VllmRocmServerArgs:
    """VllmRocmServer inputs from the stack config, the lock and the secrets."""
    host = stack.host
    if secrets.ssh_private_key is None or secrets.api_key is None:
        raise ValueError("docker-host stacks need the sshPrivateKey and apiKey secrets")
    files: list[ModelFile] = list(source.files)
    given = {**fed(stack.model, ModelLock), "revision": source.revision, "files": files}
    lock = cast(ModelLock, given)
    if not source.locked and not files:
        lock["unresolved_patterns"] = list(stack.model.files)
    root = project_root()
    patches = [
        cast(PatchOverlay, {"source": str(root / p.source), **fed(p, PatchOverlay)})
        for p in stack.patches
    ]
    connection = cast(
        SshConnection,
        {**fed(host, SshConnection), "private_key": secrets.ssh_private_key},
    )
    args = cast(
        VllmRocmServerArgs,
        {
            **fed(stack, VllmRocmServerArgs),
            **fed(host, VllmRocmServerArgs),
            **fed(stack.server, VllmRocmServerArgs),
            "connection": connection,
            "model_lock": lock,
            "flags": vllm_flags(stack),
            "caddy": caddy_site(stack),
            "api_key": secrets.api_key,
            "requirements": fed(host, HostRequirements),
            "patches": patches,
            "metrics": monitoring(stack),
        },
    )
    return with_defaults(args, VllmRocmServerArgs)


def monitoring(stack: DockerHostStack) -> HostMonitoring | None:
    """The metrics site, the GPU exporter and the alert thresholds (None: no metrics)."""
    metrics = stack.metrics
    if metrics is None:
        return None
    exporter = metrics.gpu_exporter
    return cast(
        HostMonitoring,
        {
            **fed(metrics, HostMonitoring),
            "gpu_exporter_image": exporter.image if exporter else None,
            "reference": metrics.reference.speeds(),
        },
    )
