"""Typed stack configuration: the only module that reads `pulumi.Config`.

A stack file sets keys in the `llm-infra` namespace (`llm-infra:server`, `llm-infra:model`, ...);
each is validated here, before any resource exists, into a `StackConfig`. Problems are reported
one per line as `path.to.key: what is wrong (what is allowed)`.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from components.images import parse_image
from components.llamacpp_vulkan_server import CACHE_TYPES, DEFAULT_IMAGE, CacheType
from infra.config_base import (
    LOCATION_KEYS,
    NAMESPACE,
    SECRET_KEYS,
    SECRET_PLACEHOLDER,
    ConfigError,
    DnsLabel,
    ImageReference,
    Port,
    Quantity,
    RepoModelSettings,
    Strict,
    is_pattern,
    quantity_value,
    shard_set_problems,
    validation_problems,
)
from infra.config_docker_host import Mi300xStack, docker_host_checks

__all__ = [
    "LOCATION_KEYS",
    "NAMESPACE",
    "SECRET_KEYS",
    "SECRET_PLACEHOLDER",
    "ConfigError",
    "RepoModelSettings",
    "is_pattern",
    "quantity_value",
    "shard_set_problems",
]


class KubernetesSettings(Strict):
    """Where the Kubernetes objects go."""

    namespace: DnsLabel = "default"
    create_namespace: bool = False
    context: str | None = None


class ModelSettings(RepoModelSettings):
    """A GGUF model: one quant's files, with the structure the memory plan needs."""

    architecture: Annotated[str, Field(min_length=1)]
    layers: Annotated[int, Field(ge=1)]
    metadata: dict[str, int | float | str | list[int]] = {}
    """GGUF structure keys (`deepseek4.attention.*`, ...) for the plan before a lock has them."""


class StoreSettings(Strict):
    """The model volume and the fetch Job."""

    name: DnsLabel = "models"
    size: Quantity
    storage_class: Annotated[str, Field(min_length=1)] = "local-path"
    fetch_image: ImageReference = "python:3.12.8-slim-bookworm"
    allow_floating_image: bool = False
    retired_patterns: list[Annotated[str, Field(min_length=1)]] = []
    parallel_downloads: Annotated[int, Field(ge=1, le=16)] = 3
    fetch_timeout_hours: Annotated[float, Field(gt=0, le=168)] = 12
    hf_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")] | None = None


class ProbeSettings(Strict):
    """An HTTP GET probe."""

    path: Annotated[str, Field(pattern=r"^/\S*$")] = "/health"
    initial_delay_seconds: Annotated[int, Field(ge=0)]
    period_seconds: Annotated[int, Field(ge=1)]
    failure_threshold: Annotated[int, Field(ge=1)]
    timeout_seconds: Annotated[int, Field(ge=1)] = 5

    @property
    def window_seconds(self) -> int:
        """How long the probe tolerates failures."""
        return self.initial_delay_seconds + self.period_seconds * self.failure_threshold


class ProbesSettings(Strict):
    """Probes of the server. The startup probe covers the model load (see `minLoadSeconds`)."""

    startup: ProbeSettings = ProbeSettings(
        initial_delay_seconds=30, period_seconds=10, failure_threshold=177
    )
    readiness: ProbeSettings = ProbeSettings(
        initial_delay_seconds=30, period_seconds=10, failure_threshold=6
    )
    liveness: ProbeSettings = ProbeSettings(
        initial_delay_seconds=0, period_seconds=30, failure_threshold=5
    )


class ComputeResources(Strict):
    """cpu and memory quantities."""

    cpu: Quantity
    memory: Quantity


class ResourceSettings(Strict):
    """Container requests and limits."""

    requests: ComputeResources
    limits: ComputeResources


class ServerSettings(Strict):
    """llama-server and its Deployment."""

    gpu_access: Literal["privileged", "device-plugin"] = "privileged"
    gpu_resource: Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$")] = "amd.com/gpu"
    render_group_id: Annotated[int, Field(ge=1)] | None = None
    run_as_user: Annotated[int, Field(ge=1)] = 10001
    api_key: bool = False
    gpu_gate: bool = False
    verify_after_up: bool = False
    """Run `llm-infra verify` as a Job after each `pulumi up` (needs stacks/STACK.verify.json)."""
    min_decode_tps: Annotated[float, Field(gt=0)] | None = None
    """Decode-speed floor (tok/s) of `llm-infra verify` and the post-up check."""
    """Startup probe that fails unless the load log shows the layers on a Vulkan device."""
    cache_ram: Annotated[int, Field(ge=0)] | None = None
    """`--cache-ram` MiB (prompt cache in the container's RAM); None: llama-server's 8192."""

    name: DnsLabel | None = None
    alias: Annotated[str, Field(min_length=1, pattern=r"^\S+$")]
    image: ImageReference = DEFAULT_IMAGE
    allow_floating_image: bool = False
    host: Annotated[str, Field(min_length=1)] = "0.0.0.0"
    port: Port = 8080
    service_port: Port | None = None
    jinja: bool = True
    gpu_layers: Annotated[int, Field(ge=0)]
    context_size: Annotated[int, Field(ge=1)]
    min_slot_context: Annotated[int, Field(ge=1)] = 65536
    parallel: Annotated[int, Field(ge=1)] = 1
    cont_batching: bool = True
    cache_type_k: CacheType = "f16"
    cache_type_v: CacheType = "f16"
    temperature: Annotated[float, Field(ge=0)]
    top_p: Annotated[float, Field(gt=0, le=1)]
    threads: Annotated[int, Field(ge=1)]
    node_selector: dict[str, str] = {}
    resources: ResourceSettings
    probes: ProbesSettings = ProbesSettings()
    min_load_seconds: Annotated[int, Field(ge=0)] = 300

    @property
    def resource_name(self) -> str:
        """Name of the Deployment and Service."""
        return self.name or self.alias


class MemorySettings(Strict):
    """What the memory plan checks against (the container limit is server.resources.limits)."""

    vram_gib: Annotated[float, Field(gt=0)] | None = None
    compute_gib: Annotated[float, Field(ge=0)] | None = None
    """Measured GPU compute buffers, replacing the planner's estimate."""
    check: bool = True
    """Refuse a stack that does not fit (render, preview and up)."""
    disk_read_mibps: Annotated[float, Field(gt=0)] = 300
    """Sequential read speed of the model volume: how long the load takes, for the probes."""
    init_seconds: Annotated[int, Field(ge=0)] = 60
    """Device and runtime start-up on top of reading the weights (Vulkan init, warm-up)."""


class NetworkClientSettings(Strict):
    """Pods allowed to reach the server: a namespace, optionally narrowed by pod labels."""

    namespace: DnsLabel
    pod_labels: dict[str, str] = {}


class NetworkSettings(Strict):
    """NetworkPolicies: server ingress from the clients only; fetch egress to DNS and HTTPS."""

    policies: bool = True
    clients: list[NetworkClientSettings] = [NetworkClientSettings(namespace="litellm")]
    allow_cidrs: list[str] = []
    """Extra sources (ipBlock), e.g. the node's address where the CNI subjects kubelet probes
    to NetworkPolicies (k3s dual-stack, k3s-io/k3s#10030)."""


class LitellmSettings(Strict):
    """How LiteLLM learns the route: the stack output only, or a ConfigMap in its namespace."""

    manage: Literal["output", "configmap"] = "output"
    namespace: DnsLabel = "litellm"


class StrixHaloStack(Strict):
    """A llama.cpp Vulkan server on a Kubernetes (k3s) node, with its model volume."""

    target: Literal["kubernetes"]
    kubernetes: KubernetesSettings = KubernetesSettings()
    network: NetworkSettings = NetworkSettings()
    memory: MemorySettings = MemorySettings()
    litellm: LitellmSettings = LitellmSettings()
    model: ModelSettings
    store: StoreSettings
    server: ServerSettings


StackConfig = StrixHaloStack | Mi300xStack
TARGETS: dict[str, type[StrixHaloStack] | type[Mi300xStack]] = {
    "kubernetes": StrixHaloStack,
    "docker-host": Mi300xStack,
}


def cross_checks(stack: StrixHaloStack) -> list[str]:
    """Rules of a kubernetes stack that involve more than one key."""
    server, model = stack.server, stack.model
    problems = []
    if not any(is_pattern(path) for path in model.files):
        problems += shard_set_problems(model.file_names, key="model.files")
    # llama.cpp counts the output layer too: -ngl N+1 offloads all N repeating layers and it.
    if server.gpu_layers > model.layers + 1:
        problems.append(
            f"server.gpuLayers: {server.gpu_layers} is more than the model's {model.layers} layers "
            f"(allowed 0-{model.layers + 1}; {model.layers + 1} also offloads the output layer)"
        )
    if server.context_size < server.min_slot_context:
        problems.append(
            f"server.contextSize: {server.context_size} is below the required "
            f"{server.min_slot_context} tokens (server.minSlotContext)"
        )
    elif server.context_size // server.parallel < server.min_slot_context:
        per_slot = server.context_size // server.parallel
        problems.append(
            f"server.parallel: {server.parallel} slots leave {per_slot} tokens per slot, below the "
            f"required {server.min_slot_context} (raise server.contextSize to "
            f"{server.min_slot_context * server.parallel} or lower server.parallel)"
        )
    block_count = model.metadata.get(f"{model.architecture}.block_count")
    if block_count is not None and block_count != model.layers:
        problems.append(
            f"model.layers: {model.layers} differs from model.metadata "
            f"{model.architecture}.block_count {block_count}"
        )
    if model.architecture == "deepseek4" and server.cache_type_k != server.cache_type_v:
        problems.append(
            f"server.cacheTypeV: {server.cache_type_v!r} differs from server.cacheTypeK "
            f"{server.cache_type_k!r}; deepseek4 needs equal K and V cache types "
            f"(allowed: {', '.join(CACHE_TYPES)})"
        )
    for key, image, allowed in (
        ("server.image", server.image, server.allow_floating_image),
        ("store.fetchImage", stack.store.fetch_image, stack.store.allow_floating_image),
    ):
        if not allowed and not parse_image(image).pinned:
            flag = key.rsplit(".", 1)[0] + ".allowFloatingImage"
            problems.append(
                f"{key}: {image!r} is a floating tag (pin a build tag such as "
                "server-vulkan-b11434, "
                f"a full version, or a digest; or set {flag}: true)"
            )
    startup = server.probes.startup
    if startup.window_seconds < server.min_load_seconds:
        problems.append(
            f"server.probes.startup: allows {startup.window_seconds}s to load, less than "
            f"server.minLoadSeconds {server.min_load_seconds}s (raise failureThreshold)"
        )
    if server.gpu_access == "privileged" and server.render_group_id is not None:
        problems.append(
            "server.renderGroupId: only used with server.gpuAccess: device-plugin (a privileged "
            "container reaches /dev/dri as root)"
        )
    for index, cidr in enumerate(stack.network.allow_cidrs):
        try:
            ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            problems.append(f"network.allowCidrs[{index}]: {cidr!r} is not a network ({exc})")
    if stack.network.policies and not stack.network.clients:
        problems.append(
            "network.clients: empty, so nothing could reach the server (list the client "
            "namespaces, e.g. litellm, or set network.policies: false)"
        )
    for resource in ("cpu", "memory"):
        request = getattr(server.resources.requests, resource)
        limit = getattr(server.resources.limits, resource)
        if quantity_value(request) > quantity_value(limit):
            problems.append(
                f"server.resources.requests.{resource}: {request} is more than the limit {limit}"
            )
    return problems


def parse_stack(values: Mapping[str, Any]) -> StackConfig:
    """Validate the `llm-infra` config values (keys without namespace) into a StackConfig."""
    target = values.get("target")
    if target not in TARGETS:
        allowed = ", ".join(TARGETS)
        got = "missing" if target is None else f"{target!r} is not a known target"
        raise ConfigError([f"target: {got} (allowed: {allowed})"])
    try:
        stack = TARGETS[target].model_validate(dict(values))
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc)) from None
    if isinstance(stack, StrixHaloStack):
        problems = cross_checks(stack)
    else:
        problems = docker_host_checks(stack, project_root())
    if problems:
        raise ConfigError(problems)
    return stack


def _namespace_values() -> dict[str, Any]:
    """Every config value in the `llm-infra` namespace, objects decoded."""
    raw = {**pulumi.runtime.config.get_config_env(), **pulumi.runtime.config.CONFIG.get()}
    values: dict[str, Any] = {}
    for full_key, value in raw.items():
        namespace, _, key = full_key.partition(":")
        if namespace != NAMESPACE or key in SECRET_KEYS or key in LOCATION_KEYS:
            continue
        try:
            values[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            values[key] = value
    return values


def project_root(start: Path | None = None) -> Path:
    """The nearest directory upward with this project's Pulumi.yaml (else the installed tree)."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "Pulumi.yaml"
        if candidate.is_file() and "name: llm-infra" in candidate.read_text():
            return directory
    return Path(__file__).resolve().parent.parent


def lock_path_for(stack_file: Path) -> Path:
    """Where a stack's lock lives: beside its stack file, `STACK.lock.json`."""
    name = stack_file.name.removeprefix("Pulumi.").rsplit(".", 1)[0]
    return stack_file.with_name(f"{name}.lock.json")


class StackSecrets(BaseModel):
    """Secret config values, as Outputs (never plain values in the config model)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    hf_token: pulumi.Output[str] | None
    api_key: pulumi.Output[str] | None
    ssh_private_key: pulumi.Output[str] | None = None


def missing_secrets(stack: StackConfig, present: set[str]) -> tuple[list[str], list[str]]:
    """Secrets the stack needs but the config lacks: (always errors, errors only for `up`).

    A feature switched on without its secret is a mistake in any run. The secrets a target
    always needs (the MI300X host's SSH key and API key) cannot live in a committed stack file,
    so a preview or render shows the stack without them and `pulumi up` refuses.
    """
    feature: dict[str, str] = {}
    target: dict[str, str] = {}
    if isinstance(stack, Mi300xStack):
        target["sshPrivateKey"] = "the SSH key pulumi-command logs in to the host with"
        target["apiKey"] = "the API key clients send to the public endpoint"
    elif stack.server.api_key:
        feature["apiKey"] = "server.apiKey is true"

    def lines(needed: dict[str, str]) -> list[str]:
        return [
            f"{key}: required ({why}): pulumi config set --secret {key} ..."
            for key, why in needed.items()
            if key not in present
        ]

    return lines(feature), lines(target)


def load_stack_config() -> tuple[StackConfig, Path, StackSecrets]:
    """Read and validate the stack's config; secrets come back as Outputs, never in the model.

    Returns the stack, the path of its lock file (which may not exist yet) and its secrets.
    """
    config = pulumi.Config(NAMESPACE)
    stack = parse_stack(_namespace_values())
    secrets = StackSecrets(
        hf_token=config.get_secret("hfToken"),
        api_key=config.get_secret("apiKey"),
        ssh_private_key=config.get_secret("sshPrivateKey"),
    )
    present = {
        key
        for key, value in (
            ("hfToken", secrets.hf_token),
            ("apiKey", secrets.api_key),
            ("sshPrivateKey", secrets.ssh_private_key),
        )
        if value is not None
    }
    always, for_up = missing_secrets(stack, present)
    if always or (for_up and not pulumi.runtime.is_dry_run()):
        raise ConfigError(always + for_up)
    if for_up:
        # A preview (and a render) shows the stack with a placeholder; `pulumi up` refuses.
        placeholder = pulumi.Output.secret(SECRET_PLACEHOLDER)
        missing = {line.split(":", 1)[0] for line in for_up}
        secrets = StackSecrets(
            hf_token=secrets.hf_token,
            api_key=placeholder if "apiKey" in missing else secrets.api_key,
            ssh_private_key=placeholder if "sshPrivateKey" in missing else secrets.ssh_private_key,
        )
        for line in for_up:
            pulumi.log.warn(f"{line} (preview only: pulumi up refuses)")
    lock_file = config.get("lockFile")
    lock_path = (
        Path(lock_file)
        if lock_file
        else project_root() / "stacks" / f"{pulumi.get_stack()}.lock.json"
    )
    return stack, lock_path, secrets
