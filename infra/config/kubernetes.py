"""Config models of target `kubernetes`: a llama.cpp Vulkan server and its model volume on k3s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field
from pydantic.alias_generators import to_camel

from components.grammars import FilePattern, NodePortNumber, StorageClass
from components.llamacpp.flags import SPEC_TYPES_OF_ARCHITECTURE
from components.llamacpp.inputs import (
    CACHE_TYPES,
    LlamaCppVulkanServerArgs,
    ReadMibps,
    Seconds,
    speculative_problems,
)
from components.model_store.inputs import (
    CpuVariant,
    GgufModelStoreArgs,
    GpuMemoryGib,
    ParallelDownloads,
)
from infra.config.base import (
    Architecture,
    Cidr,
    DeviceSettings,
    DnsLabel,
    HttpUrl,
    ImageReference,
    KubeContext,
    NamespacePods,
    Quantity,
    RepoModelSettings,
    SingleServer,
    Strict,
)
from infra.config.declared import declared
from infra.config.metrics import KubernetesMetricsSettings
from infra.config.server import LlamaSpeculativeSettings, ServerSettings
from infra.config.server import RuntimeSettings as RuntimeSettings
from infra.cpus import CPU_NAMES, CPU_VARIANTS, cpu_variant


def _known_cpu(name: str) -> str:
    if name not in CPU_NAMES and name not in CPU_VARIANTS:
        known = ", ".join(sorted({*CPU_NAMES, *CPU_VARIANTS}))
        raise ValueError(f"{name!r} is not a CPU or ggml CPU variant the plan knows ({known})")
    return name


NodeCpu = Annotated[str, AfterValidator(_known_cpu)]


class KubernetesSettings(Strict):
    """Where the Kubernetes objects go."""

    namespace: DnsLabel = declared(LlamaCppVulkanServerArgs, "namespace")
    create_namespace: bool = False
    """Create the namespace (labelled as managed by llm-infra); false: it must exist."""
    context: KubeContext | None = None
    """The kubeconfig context the Kubernetes provider uses; unset: the kubeconfig's current one."""


class ModelSettings(RepoModelSettings):
    """A GGUF model: one quant's files, with the structure the memory plan needs."""

    architecture: Architecture | None = None
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
    """Hugging Face hub, or a mirror of it, that `llm-infra lock` and the fetch Job
    download from; unset: huggingface.co."""
    allow_token_over_http: bool = declared(GgufModelStoreArgs, "allow_token_over_http")


class StoreSettings(HubSettings):
    """The model volume and the fetch Job."""

    name: DnsLabel = "models"
    """Name of the model volume's PersistentVolumeClaim; the fetch Job's names start with it."""
    size: Quantity
    """Requested size of the model volume (a quantity such as `200Gi`); the memory plan checks
    that the model's files fit."""
    storage_class: StorageClass = declared(GgufModelStoreArgs, "storage_class")
    fetch_image: ImageReference = declared(GgufModelStoreArgs, "fetch_image")
    allow_floating_image: bool = False
    """Accept a fetchImage tag that pins no version (e.g. `latest`)."""
    retired_patterns: list[FilePattern] = declared(GgufModelStoreArgs, "retired_patterns")
    parallel_downloads: ParallelDownloads = declared(GgufModelStoreArgs, "parallel_downloads")
    fetch_timeout_hours: Annotated[float, Field(ge=0.1, le=168)] = 12
    """How long the fetch Job may run before Kubernetes stops it (hours)."""
    upgrade: Literal["keep", "replace"] = declared(GgufModelStoreArgs, "upgrade")
    node_preflight: bool = False
    """Run a Job on the server's node before the download that checks the render node, the
    amdgpu VRAM + GTT against `memory.vramGib`, the disk, and that the server image sees a Vulkan
    device; it fails in a minute with the numbers and what to change."""


RESERVED_GIB = 4.0
"""RAM a k3s node keeps for itself unless memory.node.reservedGib says otherwise: the OS,
k3s's server, kubelet and containerd, and the system pods."""


class NodeMemory(Strict):
    """The server node's RAM: the container limit and llama-server's host-side buffers must fit
    what the node can give a pod (ramGib, less the GPU's carve-out and what the node keeps)."""

    ram_gib: Annotated[float, Field(gt=0)]
    """RAM installed in the node (GiB). On a unified-memory box (Strix Halo) all of it, the
    GPU's carve-out included: a 128 GiB box is 128."""
    carve_out_gib: Annotated[float, Field(ge=0)] = 0
    """Unified memory: the VRAM the firmware takes out of ramGib (the BIOS UMA frame buffer;
    the node preflight prints it); GPU buffers beyond it (GTT) come out of ramGib too.
    0: a discrete GPU with memory of its own."""
    reserved_gib: Annotated[float, Field(ge=0)] = RESERVED_GIB
    """RAM the node keeps for everything but the server: the OS, k3s (server, kubelet,
    containerd) and the other pods."""

    @property
    def pod_gib(self) -> float:
        """What the node can give the server's container before any GPU buffer beyond the
        carve-out: ramGib - carveOutGib - reservedGib."""
        return self.ram_gib - self.carve_out_gib - self.reserved_gib

    def formula(self, key: str = "memory.node") -> str:
        """`memory.node: ramGib 128 - carveOutGib 96 - reservedGib 4`, for messages."""
        carve = f" - carveOutGib {self.carve_out_gib:g}" if self.carve_out_gib else ""
        return f"{key}: ramGib {self.ram_gib:g}{carve} - reservedGib {self.reserved_gib:g}"


class MemorySettings(Strict):
    """What the memory plan checks against (the container limit is server.resources.limits)."""

    node: NodeMemory | None = None
    """The node's RAM (installed, the GPU's carve-out, what the OS and k3s keep): the plan
    checks the container limit and the host-side buffers against what is left, and its
    advice never raises the limit past it. Unset: only the container limit is checked."""

    vram_gib: GpuMemoryGib | None = None
    """GPU memory of the server's node that llama-server may use (GiB): the memory plan fits
    the offloaded layers, KV cache and compute buffers into it; unset: no GPU budget is checked."""
    compute_gib: Annotated[float, Field(ge=0)] | None = None
    """Measured GPU compute buffers, replacing the planner's estimate."""
    check: bool = True
    """Refuse a stack that does not fit (render, preview and up)."""
    disk_read_mibps: ReadMibps = declared(LlamaCppVulkanServerArgs, "disk_read_mibps")
    init_seconds: Seconds = declared(LlamaCppVulkanServerArgs, "init_seconds")
    node_cpu: NodeCpu | None = None
    """The server node's CPU (`zen5`, `sapphirerapids`, ...) or ggml CPU variant (`haswell`,
    ...): it decides which CPU-resident weights llama.cpp repacks into buffers of their own
    (CPU_REPACK, AMX; the node preflight prints what it sees). Unset: the plan budgets the
    largest (AMX)."""
    device: DeviceSettings | None = None
    """The node's GPU (or CPU) in the plan's device table, for the speed estimate (decode and
    prefill tok/s) and the bake-off's physical ceiling; unset: no estimate."""

    @property
    def cpu_variant(self) -> CpuVariant | None:
        """The ggml CPU variant of node_cpu (None: unset)."""
        return None if self.node_cpu is None else cpu_variant(self.node_cpu)


class NetworkClientSettings(NamespacePods):
    """Client pods allowed to reach the server: a namespace, optionally narrowed by pod labels."""


class NetworkSettings(Strict):
    """NetworkPolicies: server ingress from the clients only; fetch egress to DNS and HTTPS."""

    policies: bool = True
    """Create the NetworkPolicies; false: none, and any pod may reach the server."""
    clients: list[NetworkClientSettings] = [NetworkClientSettings(namespace="litellm")]
    """Pods the server's NetworkPolicy admits to the API port."""
    allow_cidrs: list[Cidr] = []
    """Extra sources (ipBlock), e.g. the node's address where the CNI subjects kubelet probes
    to NetworkPolicies (k3s dual-stack, k3s-io/k3s#10030)."""
    allow_world: bool = False
    """Accept allowCidrs that together admit every address (the policy then protects nothing)."""
    node_port: NodePortNumber | None = None
    """Reach the server from outside the cluster at this port (30000-32767) of the node's
    address: a NodePort Service of the API port beside the ClusterIP one, with
    externalTrafficPolicy Local so the pod sees each client's own address, and the
    NetworkPolicy admits allowCidrs there (required: the outside networks to admit). Unset:
    the server is reached from inside the cluster only."""


class LitellmSettings(Strict):
    """How LiteLLM learns the route: the stack output only, or a ConfigMap in its namespace."""

    manage: Literal["output", "configmap"] = "output"
    """`output`: the route is only a stack output (`litellmModel`); `configmap`: also a
    ConfigMap labelled `litellm/route` in LiteLLM's namespace."""
    namespace: DnsLabel = "litellm"
    """LiteLLM's namespace, where `manage: configmap` puts the route's ConfigMap."""


class ClusterStack(Strict):
    """The keys a kubernetes stack of one server and a fleet share: they apply to every server."""

    target: Literal["kubernetes"]
    """The deployment target: `kubernetes`, a cluster reached through the kubeconfig."""
    kubernetes: KubernetesSettings = KubernetesSettings()
    """Where the Kubernetes objects go: namespace and kubeconfig context."""
    network: NetworkSettings = NetworkSettings()
    """NetworkPolicies of the servers and fetch Jobs, and who may reach the servers."""
    memory: MemorySettings = MemorySettings()
    """The node figures the memory plan checks a server against (unless it has its own)."""
    litellm: LitellmSettings = LitellmSettings()
    """How LiteLLM learns the servers' routes."""
    metrics: KubernetesMetricsSettings = KubernetesMetricsSettings()
    """llama-server's metrics, who may scrape them, and each server's monitor, alerts and
    dashboard."""


class KubernetesStack(SingleServer, ClusterStack):
    """A llama.cpp server on a Kubernetes (k3s) node, with its model volume."""

    kind: ClassVar[str] = "kubernetes"
    """Its entry in the table of targets (`infra.targets.registry.TARGETS`)."""

    model: ModelSettings
    """The GGUF model to serve: repo, revision and files."""
    store: StoreSettings
    """The model volume and the Job that fetches the model into it."""
    server: ServerSettings
    """llama-server: its flags, image, runtime, probes, resources and placement."""


StrixHaloStack = KubernetesStack
"""The former name (the first kubernetes stack ran on a Strix Halo box), kept for imports."""

# The longest names the components derive: `<server>-verify-<8 hex>` and `<store>-fetcher-<8 hex>`.
SERVER_NAME_MAX = 63 - len("-verify-") - 8
STORE_NAME_MAX = 63 - len("-fetcher-") - 8


def structure_problems(
    server: ServerSettings,
    architecture: str | None,
    layers: int | None,
    metadata: Mapping[str, Any],
    *,
    from_header: bool = False,
) -> list[str]:
    """Server settings the model's structure rules out: checked with the stack file's
    model.architecture/layers before a lock, and with the locked GGUF header's after
    (`infra.plan.stack.model_structure`, `from_header`: the metadata is the whole header)."""
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
    if server.speculative is not None:
        problems += speculative_structure_problems(
            server.speculative, architecture, metadata if from_header else None
        )
    if architecture == "deepseek4" and server.cache_type_k != server.cache_type_v:
        problems.append(
            f"server.cacheTypeV: {server.cache_type_v!r} differs from server.cacheTypeK "
            f"{server.cache_type_k!r}; deepseek4 needs equal K and V cache types "
            f"(allowed: {', '.join(CACHE_TYPES)})"
        )
    return problems


def speculative_structure_problems(
    spec: LlamaSpeculativeSettings, architecture: str | None, header: Mapping[str, Any] | None
) -> list[str]:
    """The methods the model can draft with: b11434's per architecture
    (`SPEC_TYPES_OF_ARCHITECTURE`), MTP only with NextN layers in the header, a draft model for
    the methods that load one and for no other; the component's own rules.
    `header`: the locked GGUF header's metadata (None before a lock: MTP layers unknown)."""
    key = "server.speculative.method"
    inputs = spec.model_dump(exclude_none=True, exclude={"draft"})
    if spec.draft is not None:
        inputs["draft_model_path"] = spec.draft.files[0]
    # The component's draft file is the stack's draft model.
    names = {"draft_model_path": "draft"}
    problems = [
        "server.speculative."
        + ".".join(names.get(str(p), to_camel(str(p))) for p in loc)
        + ": "
        + message.replace("name its file", "set server.speculative.draft (repo, files)")
        for loc, message in speculative_problems(inputs, None)
    ]
    allowed = SPEC_TYPES_OF_ARCHITECTURE.get(architecture or "")
    if allowed is not None and spec.method not in allowed[0]:
        problems.append(
            f"{key}: {spec.method!r} does not load for {architecture} in llama-server b11434 "
            f"(allowed: {', '.join(allowed[0])}): {allowed[1]}"
        )
    nextn = None if header is None else header.get(f"{architecture}.nextn_predict_layers")
    if (
        spec.method == "draft-mtp"
        and header is not None
        and not (isinstance(nextn, int) and nextn > 0)
    ):
        problems.append(
            f"{key}: 'draft-mtp' drafts with the model's NextN/MTP layers, and its GGUF has "
            f"none ({architecture}.nextn_predict_layers is {nextn!r}); choose a quant that "
            "keeps them, or an n-gram method"
        )
    return problems
