"""Config of a llama.cpp server (`server:`): flags, probes, resources, runtime and RPC workers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from components.extra_args import ExtraArgs
from components.grammars import ExtendedResource, UrlPath
from components.k8s.pod_security import GpuAccess, RunAsUser
from components.llamacpp.flags import (
    CacheRamMib,
    ContextSize,
    DraftProbability,
    DraftTokens,
    GpuLayers,
    MinDraftTokens,
    MinP,
    PredictTokens,
    Slots,
    SpecType,
    Temperature,
    Threads,
    TopK,
    TopP,
)
from components.llamacpp.inputs import (
    CacheType,
    FailureThreshold,
    GpuAccessArgs,
    HttpProbe,
    LlamaCppRpcWorkerArgs,
    LlamaCppVulkanServerArgs,
    LlamaServerFlags,
    ProbeDelay,
    ProbeSeconds,
    ServerProbes,
)
from components.llamacpp.runtimes import BUILTIN_RUNTIMES, NAME, Runtime, runtime_for
from components.monitoring.inputs import TokensPerSecond
from infra.config.base import (
    UNION_TAG,
    AbsolutePath,
    ConfigError,
    DnsLabel,
    ImageReference,
    IpAddress,
    LabelKey,
    LabelValue,
    ModelName,
    Port,
    Quantity,
    RepoModelSettings,
    Strict,
)
from infra.config.declared import declared


class ProbeSettings(Strict):
    """An HTTP GET probe."""

    path: UrlPath = declared(HttpProbe, "path")
    initial_delay_seconds: ProbeDelay = declared(HttpProbe, "initial_delay_seconds")
    period_seconds: ProbeSeconds = declared(HttpProbe, "period_seconds")
    failure_threshold: FailureThreshold = declared(HttpProbe, "failure_threshold")
    timeout_seconds: ProbeSeconds = declared(HttpProbe, "timeout_seconds")

    @property
    def window_seconds(self) -> int:
        """How long the probe tolerates failures."""
        return self.initial_delay_seconds + self.period_seconds * self.failure_threshold


class ProbesSettings(Strict):
    """Probes of the server. The startup probe covers the model load (see `minLoadSeconds`)."""

    startup: ProbeSettings = declared(ServerProbes, "startup", ProbeSettings)
    readiness: ProbeSettings = declared(ServerProbes, "readiness", ProbeSettings)
    liveness: ProbeSettings = declared(ServerProbes, "liveness", ProbeSettings)


class ComputeResources(Strict):
    """cpu and memory quantities."""

    cpu: Quantity
    """CPU quantity, e.g. `4` or `500m`."""
    memory: Quantity
    """Memory quantity, e.g. `32Gi`."""


class ResourceSettings(Strict):
    """Container requests and limits."""

    requests: ComputeResources
    """What the scheduler reserves for the container."""
    limits: ComputeResources
    """The most the container may use (above the memory limit it is killed)."""


def _worker_resources() -> ResourceSettings:
    return ResourceSettings(
        requests=ComputeResources(cpu="500m", memory="1Gi"),
        limits=ComputeResources(cpu="4000m", memory="4Gi"),
    )


class RpcWorkerSettings(Strict):
    """One node that lends its GPU to the server through llama.cpp's rpc-server."""

    name: DnsLabel | None = None
    """Name of the worker's Deployment and Service; unset: `<server>-rpc-<index>`."""
    node_selector: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    """Node labels the worker pod must match (its own node, not the server's)."""
    vram_gib: Annotated[float, Field(gt=0)]
    """GPU memory of that node available to rpc-server (the plan checks each worker against it)."""
    compute_gib: Annotated[float, Field(ge=0)] | None = None
    """Measured compute buffer of the worker's device, replacing the planner's estimate."""
    threads: Threads | None = declared(LlamaCppRpcWorkerArgs, "threads")
    resources: ResourceSettings = _worker_resources()
    """Container requests and limits of the worker's rpc-server."""


class RpcSettings(Strict):
    """Split one model across nodes: an rpc-server per worker, `--rpc` on the server (the head)."""

    workers: Annotated[list[RpcWorkerSettings], Field(min_length=1)]
    """The nodes that lend their GPU, in `--rpc` order."""
    port: Port = declared(LlamaCppRpcWorkerArgs, "port")
    image: ImageReference | None = None
    """Worker image; unset: server.image. Head and workers must be the same llama.cpp build,
    configured with -DGGML_RPC=ON: the RPC protocol has no compatibility across versions."""
    binary: AbsolutePath = declared(LlamaCppRpcWorkerArgs, "binary")
    network_mibps: Annotated[float, Field(gt=0)] = 280
    """Throughput from the head to the workers (2.5 GbE: ~280 MiB/s): every load sends each
    worker its weights, which the startup probe must allow for."""


class LlamaSpeculativeSettings(Strict):
    """Speculative decoding in llama-server (`--spec-*`): with greedy sampling, faster answers
    that do not change. Types and bounds are the component's (`LlamaCppSpeculative`)."""

    method: SpecType
    """`--spec-type`: `draft-mtp` (the model's own NextN/MTP layers), a draft model's method
    (`draft-simple`, `draft-dspark`, `draft-eagle3`, `draft-dflash`: with `draft`), or an n-gram
    method (`ngram-mod`, ...: no model). b11434 loads only some of them per architecture."""
    num_speculative_tokens: DraftTokens | None = None
    """`--spec-draft-n-max`: tokens drafted per step (draft methods; unset: b11434's 3)."""
    min_speculative_tokens: MinDraftTokens | None = None
    """`--spec-draft-n-min`: fewest tokens a draft must propose to be used."""
    min_probability: DraftProbability | None = None
    """`--spec-draft-p-min`: the draft stops proposing below this probability."""
    draft: RepoModelSettings | None = None
    """The draft model of the draft-model methods (repo, revision, files): `llm-infra lock`
    pins it in the stack's lock beside the model, the store fetches and checks it into
    `draft/` on the model volume, the plan counts it on the GPU, the gate checks it is there."""


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

    gpu_access: GpuAccess = declared(GpuAccessArgs, "gpu_access")
    gpu_resource: ExtendedResource = declared(GpuAccessArgs, "gpu_resource")
    render_group_id: Annotated[int, Field(ge=1)] | None = None
    """GID of the node's render group, added to the pods' supplemental groups: a non-root
    process needs it to open the render node."""
    run_as_user: RunAsUser = declared(GpuAccessArgs, "run_as_user")
    api_key: bool = False
    """Require the apiKey secret as a Bearer token (`--api-key-file`, from a Kubernetes Secret);
    LiteLLM's route then sends it."""
    gpu_gate: bool = declared(LlamaCppVulkanServerArgs, "gpu_gate")
    verify_after_up: bool = False
    """Run `llm-infra verify` as a Job after each `pulumi up` (needs stacks/STACK.verify.json;
    a fleet's server stacks/STACK.SERVER.verify.json)."""
    min_decode_tps: TokensPerSecond | None = declared(LlamaCppVulkanServerArgs, "min_decode_tps")
    cache_ram: CacheRamMib | None = declared(LlamaServerFlags, "cache_ram_mib")
    repack: bool = declared(LlamaServerFlags, "repack")

    name: DnsLabel | None = None
    """Name of the Deployment and Service, and the prefix of the server's other objects;
    unset: alias."""
    alias: ModelName
    """`--alias`: the model's name in `GET /v1/models`, which LiteLLM routes by."""
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
    """Accept a server image (or runtime image) tag that pins no build."""
    host: IpAddress = declared(LlamaServerFlags, "host")
    port: Port = declared(LlamaServerFlags, "port")
    service_port: Port | None = None
    """Port of the Service; unset: port."""
    jinja: bool = declared(LlamaServerFlags, "jinja")
    gpu_layers: GpuLayers = declared(LlamaServerFlags, "gpu_layers")
    context_size: ContextSize = declared(LlamaServerFlags, "ctx_size")
    min_slot_context: Annotated[int, Field(ge=1)] = 65536
    """Smallest context one slot may get (contextSize / parallel): the checks refuse less,
    and the plan's advice keeps at least this (it never proposes fewer tokens a slot, and
    says so where a shorter context would have fitted). The default, 65536, is the reference
    stack's required minimum (seed 000: 64k for one request), and applies to a stack file
    that never names the key: each refusal and advice it causes names
    `server.minSlotContext`. A stack for shorter requests lowers it to run more slots
    (parallel: 2 with contextSize: 65536 needs minSlotContext: 32768); it may be no more than
    the model's trained context (or its YaRN extension)."""
    parallel: Slots = declared(LlamaServerFlags, "parallel")
    cont_batching: bool = declared(LlamaServerFlags, "cont_batching")
    cache_type_k: CacheType = declared(LlamaServerFlags, "cache_type_k")
    cache_type_v: CacheType = declared(LlamaServerFlags, "cache_type_v")
    temperature: Temperature = declared(LlamaServerFlags, "temperature")
    top_p: TopP = declared(LlamaServerFlags, "top_p")
    top_k: TopK | None = declared(LlamaServerFlags, "top_k")
    min_p: MinP | None = declared(LlamaServerFlags, "min_p")
    n_predict: PredictTokens | None = declared(LlamaServerFlags, "n_predict")
    threads: Threads = declared(LlamaServerFlags, "threads")
    node_selector: dict[LabelKey, LabelValue] = declared(LlamaCppVulkanServerArgs, "node_selector")
    resources: ResourceSettings
    """Container requests and limits of llama-server; limits.memory bounds what the memory
    plan places in host RAM."""
    probes: ProbesSettings = declared(LlamaCppVulkanServerArgs, "probes", ProbesSettings)
    min_load_seconds: Annotated[int, Field(ge=0)] = 300
    """The least time the startup probe must allow (initialDelaySeconds + periodSeconds x
    failureThreshold): the checks refuse a shorter window."""
    rpc: RpcSettings | None = None
    """Split the model across other nodes' GPUs (llama.cpp RPC); None: this node only."""
    speculative: LlamaSpeculativeSettings | None = None
    """Speculative decoding (`--spec-type` and its `--spec-draft-*` settings); None: none."""
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
