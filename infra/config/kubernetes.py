"""Config models of target `kubernetes`: a llama.cpp Vulkan server and its model volume on k3s."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag

from components.addresses import covers_every_address
from components.extra_args import ExtraArgs, located
from components.llamacpp.inputs import (
    CACHE_TYPES,
    GPU_RESOURCE,
    RPC_BINARY,
    RPC_PORT,
    CacheType,
    extra_args_problems,
    runtime_record,
    server_runtime_problems,
    worker_runtime_problems,
)
from components.llamacpp.runtimes import BUILTIN_RUNTIMES, NAME, Runtime, runtime_for
from components.model_store.inputs import FETCH_IMAGE, PARALLEL_DOWNLOADS
from components.payloads.fetcher import retire_pattern_problem
from infra.config.base import (
    UNION_TAG,
    AbsolutePath,
    Cidr,
    ConfigError,
    DnsLabel,
    HttpUrl,
    Identifier,
    ImageReference,
    IpAddress,
    KubeContext,
    LabelKey,
    LabelValue,
    ModelName,
    Port,
    Quantity,
    RepoModelSettings,
    Strict,
    image_problems,
    is_pattern,
    quantity_value,
    shard_set_problems,
    stack_placement_problems,
)
from infra.config.inputs import component_problems
from infra.config.metrics import KubernetesMetricsSettings
from infra.plan.repack import CPU_NAMES, CPU_VARIANTS


def _known_cpu(name: str) -> str:
    if name not in CPU_NAMES and name not in CPU_VARIANTS:
        known = ", ".join(sorted({*CPU_NAMES, *CPU_VARIANTS}))
        raise ValueError(f"{name!r} is not a CPU or ggml CPU variant the plan knows ({known})")
    return name


NodeCpu = Annotated[str, AfterValidator(_known_cpu)]


class KubernetesSettings(Strict):
    """Where the Kubernetes objects go."""

    namespace: DnsLabel = "default"
    create_namespace: bool = False
    context: KubeContext | None = None


class ModelSettings(RepoModelSettings):
    """A GGUF model: one quant's files, with the structure the memory plan needs."""

    architecture: Identifier | None = None
    """GGUF `general.architecture` (`deepseek4`, `qwen3moe`, `llama`, ...). Read from the
    lock's GGUF header once the model is locked; needed only before that, and where set it
    must agree with the header."""
    layers: Annotated[int, Field(ge=1)] | None = None
    """Repeating layers (`{architecture}.block_count`). From the lock once locked; where set
    it must agree with the header."""
    metadata: dict[
        Annotated[str, Field(max_length=256, pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")],
        int | float | Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{0,256}$")] | list[int],
    ] = {}
    """GGUF structure keys for the plan before a lock has them (`llm-infra lock` reads them
    from the header; a key the locked header also has must hold the header's value). The plan
    reads `ARCH.block_count`, `.embedding_length`, `.attention.head_count` (required),
    `.attention.head_count_kv`, `.attention.key_length`, `.attention.value_length`,
    `.feed_forward_length` or `.expert_feed_forward_length`, `.expert_used_count`,
    `.context_length`, `.vocab_size` (printed as assumptions where missing); deepseek4 also
    `.attention.sliding_window`, `.attention.compress_ratios`, `.attention.indexer.key_length`."""


class HubSettings(Strict):
    """Where the model comes from: the keys `llm-infra lock` and the fetch Job share."""

    hf_endpoint: HttpUrl | None = None
    allow_token_over_http: bool = False
    """Send hfToken to a plain-http hfEndpoint (a mirror on a trusted network); refused
    unless set."""


class StoreSettings(HubSettings):
    """The model volume and the fetch Job."""

    name: DnsLabel = "models"
    size: Quantity
    storage_class: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] = (
        "local-path"
    )
    fetch_image: ImageReference = FETCH_IMAGE
    allow_floating_image: bool = False
    retired_patterns: list[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9._*?\[\]+=@][A-Za-z0-9._*?\[\]+=@-]{0,254}$")]
    ] = []
    """Glob patterns of file names on the volume (no `/`; a leading `-` would read as a flag)."""
    parallel_downloads: Annotated[int, Field(ge=1, le=16)] = PARALLEL_DOWNLOADS
    fetch_timeout_hours: Annotated[float, Field(ge=0.1, le=168)] = 12
    upgrade: Literal["keep", "replace"] = "keep"
    """`keep`: on a new lock the old model stays on the volume, and serving, until the new one is
    verified (the volume must hold both); `replace`: when it cannot, the retired files go first
    and the server is down until the new model is in place."""
    node_preflight: bool = False
    """Run a Job on the server's node before the download that checks the render node, the
    amdgpu VRAM + GTT against `memory.vramGib`, the disk, and that the server image sees a Vulkan
    device; it fails in a minute with the numbers and what to change."""


class ProbeSettings(Strict):
    """An HTTP GET probe."""

    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._~/-]*$")] = "/health"
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


def _worker_resources() -> ResourceSettings:
    return ResourceSettings(
        requests=ComputeResources(cpu="500m", memory="1Gi"),
        limits=ComputeResources(cpu="4000m", memory="4Gi"),
    )


class RpcWorkerSettings(Strict):
    """One node that lends its GPU to the server through llama.cpp's rpc-server."""

    name: DnsLabel | None = None
    """Name of the worker's Deployment and Service (default `<server>-rpc-<index>`)."""
    node_selector: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    """Node labels the worker pod must match (its own node, not the server's)."""
    vram_gib: Annotated[float, Field(gt=0)]
    """GPU memory of that node available to rpc-server (the plan checks each worker against it)."""
    compute_gib: Annotated[float, Field(ge=0)] | None = None
    """Measured compute buffer of the worker's device, replacing the planner's estimate."""
    threads: Annotated[int, Field(ge=1)] | None = None
    """`-t`: CPU threads of rpc-server (its CPU device only)."""
    resources: ResourceSettings = _worker_resources()


class RpcSettings(Strict):
    """Split one model across nodes: an rpc-server per worker, `--rpc` on the server (the head)."""

    workers: Annotated[list[RpcWorkerSettings], Field(min_length=1)]
    port: Port = RPC_PORT
    """rpc-server's port on each worker (container and Service)."""
    image: ImageReference | None = None
    """Worker image (default: server.image). Head and workers must be the same llama.cpp build,
    configured with -DGGML_RPC=ON: the RPC protocol has no compatibility across versions."""
    binary: AbsolutePath = RPC_BINARY
    """rpc-server inside the image."""
    network_mibps: Annotated[float, Field(gt=0)] = 280
    """Throughput from the head to the workers (2.5 GbE: ~280 MiB/s): every load sends each
    worker its weights, which the startup probe must allow for."""


class RuntimeSettings(Strict):
    """A runtime declared in the stack file: a llama.cpp build of one backend, and what it can
    do (checks go by what it declares, never by how its image is spelt)."""

    name: Annotated[str, Field(pattern=NAME.pattern)]
    """Its name, as the plan and the checks call it."""
    image: ImageReference
    """Its image, pinned by a build tag or a digest (server.allowFloatingImage allows another)."""
    backend: Literal["vulkan", "rocm", "cpu"]
    """`vulkan` (the pod opens /dev/dri), `rocm` (/dev/kfd and /dev/dri) or `cpu` (no device:
    every layer on the host, server.gpuLayers 0)."""
    capabilities: list[Literal["rpc"]] = []
    """What the build has beyond serving: `rpc` (configured with -DGGML_RPC=ON), which
    server.rpc needs (on the workers too)."""
    digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")] | None = None
    """The digest the image is pinned to: the pod runs `image@digest`."""


RuntimeName = Literal["vulkan", "rocm", "cpu", "tuned"]


def _runtime_form(value: Any) -> str:
    return (
        f"{UNION_TAG}mapping"
        if isinstance(value, Mapping | RuntimeSettings)
        else f"{UNION_TAG}name"
    )


RuntimeChoice = Annotated[
    Annotated[RuntimeName, Tag(f"{UNION_TAG}name")]
    | Annotated[RuntimeSettings, Tag(f"{UNION_TAG}mapping")],
    Discriminator(_runtime_form),
]
"""A built-in runtime's name (or `tuned`), or a declared runtime: each error names one form."""


class ServerSettings(Strict):
    """llama-server and its Deployment."""

    gpu_access: Literal["privileged", "device-plugin"] = "privileged"
    gpu_resource: Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$")] = GPU_RESOURCE
    render_group_id: Annotated[int, Field(ge=1)] | None = None
    run_as_user: Annotated[int, Field(ge=1)] = 10001
    api_key: bool = False
    gpu_gate: bool = False
    verify_after_up: bool = False
    """Run `llm-infra verify` as a Job after each `pulumi up` (needs stacks/STACK.verify.json;
    a fleet's server stacks/STACK.SERVER.verify.json)."""
    min_decode_tps: Annotated[float, Field(gt=0)] | None = None
    """Decode-speed floor (tok/s) of `llm-infra verify` and the post-up check."""
    """Startup probe that fails unless the load log shows the layers on a Vulkan device."""
    cache_ram: Annotated[int, Field(ge=0)] | None = None
    """`--cache-ram` MiB (prompt cache in the container's RAM); None: llama-server's 8192."""
    repack: bool = True
    """Let llama.cpp repack CPU-resident weights into CPU_REPACK/AMX buffers (false:
    `--no-repack`). b11434's AMX path dies on quantized weights: the plan refuses it on an AMX
    node (memory.nodeCpu) until this is false."""

    name: DnsLabel | None = None
    alias: ModelName
    runtime: RuntimeChoice = "vulkan"
    """What runs llama-server: a built-in runtime, the official image of the pinned build b11434
    of one backend: `vulkan` (`server-vulkan-b11434`, /dev/dri), `rocm` (`server-rocm-b11434`,
    /dev/kfd and /dev/dri) or `cpu` (`server-b11434`: no GPU, server.gpuLayers 0, the GPU gate
    then wants every layer on the host); a mapping `{name, image, backend, capabilities,
    digest}` for a custom build; or `tuned`: the winner `llm-infra tune` recorded in
    stacks/STACK.tune.json (a fleet's server: STACK.SERVER.tune.json). The runtime decides the
    devices mounted, the environment, the device names the GPU gate and the plan expect, and
    the plan's compute-buffer estimate; server.rpc needs one that declares `rpc`."""
    image: ImageReference | None = None
    """The server image; unset: the runtime's. For a built-in runtime, another build of the
    same backend (an official tag of another backend is refused; an image of another repository
    is a custom build, taken to have `rpc`); a declared or tuned runtime names its own."""
    allow_floating_image: bool = False
    host: IpAddress = "0.0.0.0"
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
    top_k: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    """`--top-k`: sample from the k most likely tokens, for requests that set none (0: every
    token); unset: llama-server's own (40)."""
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    """`--min-p`: drop tokens less likely than this share of the most likely one, for requests
    that set none (0: off); unset: llama-server's own (0.05)."""
    threads: Annotated[int, Field(ge=1)]
    node_selector: dict[LabelKey, LabelValue] = {}
    resources: ResourceSettings
    probes: ProbesSettings = ProbesSettings()
    min_load_seconds: Annotated[int, Field(ge=0)] = 300
    rpc: RpcSettings | None = None
    """Split the model across other nodes' GPUs (llama.cpp RPC); None: this node only."""
    extra_args: ExtraArgs = []
    """Further llama-server b11434 arguments, as argv words after the rendered flags, e.g.
    `["--n-cpu-moe", "20", "-ub", "1024"]` (never through a shell: quotes and `$` are plain
    characters). Each option must be one llama-server knows, with its value; one the other keys
    set (`-c` is `contextSize`, `-ngl` is `gpuLayers`, ...) is refused in any spelling. The
    memory plan counts `-b`/`-ub`, and `-ot PATTERN=CPU`, `--cpu-moe`, `--n-cpu-moe`,
    `--n-cpu-ffn` from the lock's per-tensor sizes; it refuses options that change memory in
    ways it cannot count (`--no-kv-offload`, `--mmproj`, a draft model, ...)."""

    @property
    def resource_name(self) -> str:
        """Name of the Deployment and Service."""
        return self.name or self.alias

    @property
    def rpc_worker_names(self) -> list[str]:
        """Names of the RPC workers' objects, in `--rpc` order (empty without rpc)."""
        if self.rpc is None:
            return []
        return [
            worker.name or f"{self.resource_name}-rpc-{index}"
            for index, worker in enumerate(self.rpc.workers)
        ]

    @property
    def declared_runtime(self) -> Runtime:
        """The runtime server.runtime names (the tune record's winner once it is read)."""
        if self.runtime == "tuned":
            raise ConfigError(
                ["server.runtime: tuned, but the tune record was not read (infra.tune reads it)"]
            )
        if isinstance(self.runtime, str):
            return BUILTIN_RUNTIMES[self.runtime]
        return Runtime(
            name=self.runtime.name,
            image=self.runtime.image,
            backend=self.runtime.backend,
            capabilities=frozenset(self.runtime.capabilities),
            digest=self.runtime.digest,
        )

    @property
    def named_runtime(self) -> bool:
        """Whether the stack names server.runtime (else server.image, or the default, decides)."""
        return "runtime" in self.model_fields_set

    @property
    def server_image(self) -> str:
        """The image the server runs: server.image, else the runtime's (pinned) image."""
        return self.image or self.declared_runtime.pinned_image

    @property
    def effective_runtime(self) -> Runtime:
        """The runtime of the server's pod (`runtimes.runtime_for`): the named one with
        server.image in its place, or the one server.image (else the default) stands for."""
        declared = self.declared_runtime if self.named_runtime else None
        return runtime_for(self.image, declared)[0]

    @property
    def rpc_image(self) -> str:
        """The workers' image: the server's own build unless rpc.image says otherwise."""
        return (self.rpc.image if self.rpc else None) or self.server_image


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
    node_cpu: NodeCpu | None = None
    """The server node's CPU (`zen5`, `sapphirerapids`, ...) or ggml CPU variant (`haswell`,
    ...): it decides which CPU-resident weights llama.cpp repacks into buffers of their own
    (CPU_REPACK, AMX; the node preflight prints what it sees). Unset: the plan budgets the
    largest (AMX)."""


class NetworkClientSettings(Strict):
    """Pods allowed to reach the server: a namespace, optionally narrowed by pod labels."""

    namespace: DnsLabel
    pod_labels: dict[LabelKey, LabelValue] = {}


class NetworkSettings(Strict):
    """NetworkPolicies: server ingress from the clients only; fetch egress to DNS and HTTPS."""

    policies: bool = True
    clients: list[NetworkClientSettings] = [NetworkClientSettings(namespace="litellm")]
    allow_cidrs: list[Cidr] = []
    """Extra sources (ipBlock), e.g. the node's address where the CNI subjects kubelet probes
    to NetworkPolicies (k3s dual-stack, k3s-io/k3s#10030)."""
    allow_world: bool = False
    """Accept allowCidrs that together admit every address (the policy then protects nothing)."""


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
    metrics: KubernetesMetricsSettings = KubernetesMetricsSettings()
    model: ModelSettings
    store: StoreSettings
    server: ServerSettings


# The longest names the components derive: `<server>-verify-<8 hex>` and `<store>-fetcher-<8 hex>`.
SERVER_NAME_MAX = 63 - len("-verify-") - 8
STORE_NAME_MAX = 63 - len("-fetcher-") - 8


def kubernetes_name_problems(stack: StrixHaloStack) -> list[str]:
    """Names that would not be valid Kubernetes names once the components derive theirs."""
    problems = []
    server = stack.server
    key = "server.name" if server.name else "server.alias"
    name = server.resource_name
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        problems.append(
            f"{key}: {name!r} is not a Kubernetes name (lowercase letters, digits and -, starting "
            "with a letter)" + ("; set server.name" if key == "server.alias" else "")
        )
    elif len(name) > SERVER_NAME_MAX:
        problems.append(
            f"{key}: {name!r} is {len(name)} characters; the server's objects add up to 16 "
            f"(`-verify-<digest>`), so at most {SERVER_NAME_MAX}"
            + ("; set a shorter server.name" if key == "server.alias" else "")
        )
    if len(stack.store.name) > STORE_NAME_MAX:
        problems.append(
            f"store.name: {stack.store.name!r} is {len(stack.store.name)} characters; the fetch "
            f"Job and ConfigMap add 17 (`-fetcher-<digest>`), so at most {STORE_NAME_MAX}"
        )
    return problems


def cross_checks(stack: StrixHaloStack) -> list[str]:
    """Rules of a kubernetes stack that involve more than one key."""
    server, model = stack.server, stack.model
    # The server component's own rule, before the plan reads the words.
    problems = component_problems(
        "LlamaCppVulkanServer",
        located(
            extra_args_problems(server.extra_args, server.cache_type_v, server.gpu_gate),
            "extra_args",
        ),
    )
    if not any(is_pattern(path) for path in model.files):
        problems += shard_set_problems(model.file_names, key="model.files")
    # Exact model.files are checked here; names a lock resolves, by the plan (infra.plan.stack).
    exact = [] if any(is_pattern(path) for path in model.files) else model.file_names
    for index, pattern in enumerate(stack.store.retired_patterns):
        problem = retire_pattern_problem(pattern, exact)
        if problem:
            problems.append(f"store.retiredPatterns[{index}]: {problem}")
    problems += structure_problems(server, model.architecture, model.layers, model.metadata)
    if server.context_size < server.min_slot_context:
        problems.append(
            f"server.contextSize: {server.context_size} is below the required "
            f"{server.min_slot_context} tokens (server.minSlotContext)"
        )
    elif server.context_size // server.parallel < server.min_slot_context:
        per_slot = server.context_size // server.parallel
        problems.append(
            f"server.parallel: {server.parallel} slots leave {per_slot} tokens per slot, below the "
            f"required {server.min_slot_context} of server.minSlotContext (raise "
            f"server.contextSize to {server.min_slot_context * server.parallel}, lower "
            "server.parallel, or lower server.minSlotContext)"
        )
    images = [("store.fetchImage", stack.store.fetch_image, stack.store.allow_floating_image)]
    if server.image is not None:
        images.insert(0, ("server.image", server.image, server.allow_floating_image))
    elif isinstance(server.runtime, RuntimeSettings) and server.runtime.digest is None:
        runtime_image = server.runtime.image
        images.insert(0, ("server.runtime.image", runtime_image, server.allow_floating_image))
    for key, image, allowed in images:
        problems += image_problems(
            key,
            image,
            allowed,
            "a build tag such as server-vulkan-b11434, a full version, or a digest",
            "server.allowFloatingImage" if key.startswith("server.") else None,
        )
    problems += runtime_problems(stack)
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
    network = stack.network
    if covers_every_address(list(network.allow_cidrs)) and not network.allow_world:
        problems.append(
            f"network.allowCidrs: {list(network.allow_cidrs)} together admit every address, so "
            "the NetworkPolicy protects nothing (list the node addresses, or set "
            "network.allowWorld: true)"
        )
    problems += kubernetes_name_problems(stack)
    problems += rpc_problems(stack)
    problems += metrics_problems(stack)
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


def runtime_problems(stack: StrixHaloStack, where: str = "") -> list[str]:
    """The server's runtime against its image and keys: the components' own rules
    (components/llamacpp/inputs.py) in the stack file's words, and the node preflight, which
    checks a Vulkan device. `where`: whence a tuned runtime came (`tuned (the winner ...)`)."""
    server = stack.server
    if server.runtime == "tuned":
        if server.image is not None:
            return [
                "server.image: set while server.runtime: tuned takes the image from the tune "
                "record's winner (drop server.image, or name the runtime)"
            ]
        return []
    named = {"runtime": runtime_record(server.declared_runtime)} if server.named_runtime else {}
    head = {
        "image": server.server_image,
        **named,
        "gpu_access": server.gpu_access,
        "flags": {"gpu_layers": server.gpu_layers, "rpc": ["rpc"] if server.rpc else None},
    }
    problems = component_problems("LlamaCppVulkanServer", server_runtime_problems(head))
    if server.rpc is not None and server.rpc.image is not None:
        worker = {"image": server.rpc.image, **named, "gpu_access": server.gpu_access}
        problems += component_problems("LlamaCppRpcWorker", worker_runtime_problems(worker))
    runtime = server.effective_runtime
    if stack.store.node_preflight and runtime.backend != "vulkan":
        problems.append(
            "store.nodePreflight: checks a Vulkan device in the server image (llama-server "
            f"--list-devices); the runtime {runtime.name!r} ({runtime.backend}) is not checked "
            "by it (set store.nodePreflight: false)"
        )
    if where:
        key = "server.runtime: "
        problems = [
            f"{key}{where}: {p.removeprefix(key)}" if p.startswith(key) else f"{p} ({key}{where})"
            for p in problems
        ]
    return problems


def structure_problems(
    server: ServerSettings,
    architecture: str | None,
    layers: int | None,
    metadata: Mapping[str, Any],
) -> list[str]:
    """Server settings the model's structure rules out: checked with the stack file's
    model.architecture/layers before a lock, and with the locked GGUF header's after
    (`infra.plan.stack.model_structure`)."""
    problems = []
    # llama.cpp counts the output layer too: -ngl N+1 offloads all N repeating layers and it.
    if layers is not None and server.gpu_layers > layers + 1:
        problems.append(
            f"server.gpuLayers: {server.gpu_layers} is more than the model's {layers} layers "
            f"(allowed 0-{layers + 1}; {layers + 1} also offloads the output layer)"
        )
    block_count = metadata.get(f"{architecture}.block_count")
    if layers is not None and block_count is not None and block_count != layers:
        problems.append(
            f"model.layers: {layers} differs from model.metadata "
            f"{architecture}.block_count {block_count}"
        )
    if architecture == "deepseek4" and server.cache_type_k != server.cache_type_v:
        problems.append(
            f"server.cacheTypeV: {server.cache_type_v!r} differs from server.cacheTypeK "
            f"{server.cache_type_k!r}; deepseek4 needs equal K and V cache types "
            f"(allowed: {', '.join(CACHE_TYPES)})"
        )
    return problems


def rpc_problems(stack: StrixHaloStack) -> list[str]:
    """Rules of a split model: RPC-enabled images, workers on other nodes, distinct names."""
    server, rpc = stack.server, stack.server.rpc
    if rpc is None:
        return []
    problems = []
    # The images' RPC backend: the components' rule (components/llamacpp/inputs.py).
    if rpc.image is not None:
        problems += image_problems(
            "server.rpc.image",
            rpc.image,
            server.allow_floating_image,
            "the server's own build (a tag with the build number, or a digest)",
        )
    names = server.rpc_worker_names
    for index, (worker, name) in enumerate(zip(rpc.workers, names, strict=True)):
        key = f"server.rpc.workers[{index}]"
        if name == server.resource_name or names.index(name) != index:
            problems.append(
                f"{key}.name: {name!r} is already the name of the server or of another worker"
            )
        elif len(name) > SERVER_NAME_MAX:
            problems.append(f"{key}.name: {name!r} is longer than {SERVER_NAME_MAX} characters")
        for resource in ("cpu", "memory"):
            request = getattr(worker.resources.requests, resource)
            limit = getattr(worker.resources.limits, resource)
            if quantity_value(request) > quantity_value(limit):
                problems.append(
                    f"{key}.resources.requests.{resource}: {request} is more than the limit {limit}"
                )
    if rpc.port == server.port:
        problems.append(f"server.rpc.port: {rpc.port} is the server's own port (server.port)")
    problems += stack_placement_problems(
        [
            ("server.nodeSelector", server.node_selector),
            *[
                (f"server.rpc.workers[{index}].nodeSelector", worker.node_selector)
                for index, worker in enumerate(rpc.workers)
            ],
        ]
    )
    return problems


def metrics_problems(stack: StrixHaloStack) -> list[str]:
    """Metrics settings that contradict each other or the network settings."""
    metrics = stack.metrics
    problems = []
    if not metrics.enabled:
        for key, on in (
            ("serviceMonitor", metrics.service_monitor),
            ("rules", metrics.rules),
            # On by default: a contradiction only when the stack asks for it.
            ("dashboard", metrics.dashboard and "dashboard" in metrics.model_fields_set),
        ):
            if on:
                problems.append(
                    f"metrics.{key}: true needs the server's /metrics (set metrics.enabled: true, "
                    f"or metrics.{key}: false)"
                )
    elif stack.network.policies and not metrics.scrapers:
        problems.append(
            "metrics.scrapers: empty, so the NetworkPolicy admits no scraper (list the "
            "monitoring namespace, e.g. monitoring, or set metrics.enabled: false)"
        )
    return problems
