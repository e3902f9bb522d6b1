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
    ModelLock,
    PatchOverlay,
    SshConnection,
    VllmFlags,
    VllmRocmServerArgs,
)
from infra.config import DockerHostStack, StackSecrets, project_root
from infra.config.feeds import Fed, fed
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


def endpoint_url(stack: DockerHostStack) -> str:
    """The public HTTPS base URL of the stack."""
    caddy: CaddySite = fed(stack)["VllmRocmServer", "caddy"]
    return base_url(caddy)


def server_props(stack: DockerHostStack) -> dict[str, Any]:
    """What vLLM's `/v1/models` must report (vLLM has no /props): the host's props.json, from
    the same flags, named by the stack file's keys."""

    def key(path: str) -> str:
        return stack_key("VllmRocmServer", tuple(path.split(".")))

    return expected_models(vllm_flags(stack, fed(stack)), key)


def vllm_flags(stack: DockerHostStack, given: Fed) -> VllmFlags:
    """`vllm serve` flags from the stack config (`given`: what it gives, `fed`)."""
    return cast(
        VllmFlags,
        {
            "model": f"{MODELS_IN_CONTAINER}/{Path(stack.host.model_dir).name}",
            "host": "0.0.0.0",
            **given["VllmRocmServer", "flags"],
        },
    )


def server_args(
    stack: DockerHostStack, source: ModelSource, secrets: StackSecrets
) -> VllmRocmServerArgs:
    """VllmRocmServer inputs from the stack config, the lock and the secrets."""
    if secrets.ssh_private_key is None or secrets.api_key is None:
        raise ValueError("docker-host stacks need the sshPrivateKey and apiKey secrets")
    given = fed(stack)
    files: list[ModelFile] = list(source.files)
    lock = cast(
        ModelLock,
        {**given["VllmRocmServer", "model_lock"], "revision": source.revision, "files": files},
    )
    if not source.locked and not files:
        lock["unresolved_patterns"] = list(stack.model.files)
    root = project_root()
    patches = [
        cast(PatchOverlay, {"source": str(root / p.source), **overlay})
        for p, overlay in zip(stack.patches, given["VllmRocmServer", "patches"], strict=True)
    ]
    connection = cast(
        SshConnection,
        {**given["VllmRocmServer", "connection"], "private_key": secrets.ssh_private_key},
    )
    args = cast(
        VllmRocmServerArgs,
        {
            **given["VllmRocmServer", ""],
            "connection": connection,
            "model_lock": lock,
            "flags": vllm_flags(stack, given),
            "caddy": given["VllmRocmServer", "caddy"],
            "api_key": secrets.api_key,
            "requirements": given["VllmRocmServer", "requirements"],
            "patches": patches,
            "metrics": monitoring(stack, given),
        },
    )
    return with_defaults(args, VllmRocmServerArgs)


def monitoring(stack: DockerHostStack, given: Fed) -> HostMonitoring | None:
    """The metrics site, the GPU exporter and the alert thresholds (None: no metrics)."""
    metrics = stack.metrics
    if metrics is None:
        return None
    exporter = metrics.gpu_exporter
    return cast(
        HostMonitoring,
        {
            **given["VllmRocmServer", "metrics"],
            "gpu_exporter_image": exporter.image if exporter else None,
            "reference": metrics.reference.speeds(),
        },
    )
