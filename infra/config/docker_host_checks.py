"""Rules of a docker-host stack that involve more than one key, or files."""

from __future__ import annotations

import hashlib
from pathlib import Path

from components.extra_args import located
from components.images import parse_image
from components.vllm.inputs import extra_args_problems
from infra.config.base import image_problems, is_ip_address
from infra.config.docker_host import DockerHostStack
from infra.config.inputs import component_problems

# Directories of the operating system: no model or compose project goes there.
SYSTEM_DIRS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run",
    "/sbin", "/sys", "/usr", "/var",
)  # fmt: skip


def docker_host_checks(stack: DockerHostStack, root: Path) -> list[str]:
    """Rules of a docker-host stack that involve more than one key, or files."""
    server, caddy = stack.server, stack.caddy
    # VllmRocmServer's own rule, reported before anything reads the words.
    problems = component_problems(
        "VllmRocmServer", located(extra_args_problems(server.extra_args), "extra_args")
    )
    if parse_image(server.image).digest is None and not server.allow_floating_image:
        problems.append(
            f"server.image: {server.image!r} has no digest (pin it as "
            "vllm/vllm-openai-rocm@sha256:<digest>, or set server.allowFloatingImage: true)"
        )
    problems += image_problems(
        "caddy.image", caddy.image, caddy.allow_floating_image, "a full version such as 2.11.7"
    )
    problems += image_problems("fetchImage", stack.fetch_image, False, "a full version")
    if caddy.tls == "auto" and is_ip_address(caddy.site):
        problems.append(
            f"caddy.tls: auto needs a domain for its certificate; {caddy.site} is an IP address "
            "(use tls: internal)"
        )
    if caddy.tls == "auto" and not caddy.acme_email:
        problems.append("caddy.acmeEmail: a valid email is required with caddy.tls: auto")
    # The allowlists and the host key: VllmRocmServer's own rules (components/vllm/inputs.py),
    # reported under these keys when the program builds it.
    host = stack.host
    for key, directory in (("host.modelDir", host.model_dir), ("host.baseDir", host.base_dir)):
        top = "/" + directory.split("/")[1]
        if top in SYSTEM_DIRS:
            problems.append(
                f"{key}: {directory!r} is in the system directory {top} (use /opt, /srv, /data "
                "or /home)"
            )
    for index, patch in enumerate(stack.patches):
        path = root / patch.source
        if not path.resolve().is_relative_to(root.resolve()):
            problems.append(
                f"patches[{index}].source: {patch.source!r} leads outside the project (a link?)"
            )
        elif not path.is_file():
            problems.append(f"patches[{index}].source: {patch.source!r} does not exist")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != patch.sha256:
            problems.append(
                f"patches[{index}].sha256: {patch.source} has sha256 "
                f"{hashlib.sha256(path.read_bytes()).hexdigest()}, not the pinned {patch.sha256}"
            )
    targets = [p.target for p in stack.patches]
    if len(set(targets)) != len(targets):
        problems.append("patches: two patches overlay the same target")
    problems += host_metrics_problems(stack)
    model_dir, base_dir = stack.host.model_dir, stack.host.base_dir
    if model_dir == base_dir:
        problems.append(
            f"host.modelDir: {model_dir!r} is host.baseDir (the compose files and the API key env "
            "file live there, and vLLM mounts the model directory): give the model its own"
        )
    elif f"{base_dir}/".startswith(f"{model_dir}/"):
        problems.append(
            f"host.baseDir: {base_dir!r} is inside host.modelDir {model_dir!r}, which vLLM mounts: "
            "the API key env file would be in the mount"
        )
    return problems


# Caddy's own listeners on the host: the metrics site needs a port of its own.
CADDY_HOST_PORTS = (80, 443)


def host_metrics_problems(stack: DockerHostStack) -> list[str]:
    """The metrics site's port and the GPU exporter's image (its allowlist: the component's
    rule, as the API site's)."""
    metrics = stack.metrics
    if metrics is None:
        return []
    problems = []
    if metrics.port in CADDY_HOST_PORTS:
        problems.append(
            f"metrics.port: {metrics.port} is the API site's port (the metrics site needs its own, "
            "e.g. 9443)"
        )
    exporter = metrics.gpu_exporter
    if exporter is not None:
        problems += image_problems(
            "metrics.gpuExporter.image",
            exporter.image,
            exporter.allow_floating_image,
            "a release such as v1.2.1, or a digest",
        )
    return problems
