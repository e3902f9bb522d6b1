"""Inputs of LlamaCppVulkanServer and LlamaCppRpcWorker: runtime, probes, Args, with their rules.

Every rule for these inputs lives here or in `components.llamacpp.flags` (llama-server's flags and
extra args, re-exported here); the builders take them validated. Over ~400 lines: the Args of
both components share their cross-field rules, which must sit beside the TypedDicts they check.
"""

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, TypedDict, cast

from pydantic import Field

from components.extra_args import (
    ExtraArgs,
    located,
)
from components.grammars import (
    AbsolutePath,
    DnsLabel,
    ExtendedResource,
    ImageReference,
    LabelKey,
    LabelValue,
    NodePortNumber,
    Port,
    Quantity,
    ResourceName,
    UrlPath,
)
from components.k8s.network_policies import NetworkClient
from components.k8s.pod_security import DEFAULT_DRI_DEVICE, DEFAULT_UID, GpuAccess, RunAsUser
from components.llamacpp.flags import (
    API_KEY_OPTION,
    CACHE_TYPES,
    DRAFT_MODEL_TYPES,
    FLAG_OPTIONS,
    MODEL_PRESETS,
    OWNED_OPTIONS,
    REFUSED_OPTIONS,
    TENSOR_OVERRIDE_OPTIONS,
    UNQUANTIZED_CACHE_TYPES,
    CacheType,
    LlamaCppSpeculative,
    LlamaServerFlags,
    Threads,
    extra_args_problems,
    tensor_override_problem,
)
from components.llamacpp.runtimes import (
    DEFAULT_RUNTIME,
    NAME,
    RPC,
    Runtime,
    missing_capability,
    runtime_for,
)
from components.model_store.inputs import DRAFT_DIR, MODELS_MOUNT, ModelVolume
from components.monitoring.inputs import KubernetesMonitoring, TokensPerSecond
from components.validation import Default, Input, Problem, cross_field_rule, documented, ref

__all__ = [
    "API_KEY_OPTION",
    "CACHE_TYPES",
    "FLAG_OPTIONS",
    "MODEL_PRESETS",
    "OWNED_OPTIONS",
    "REFUSED_OPTIONS",
    "TENSOR_OVERRIDE_OPTIONS",
    "UNQUANTIZED_CACHE_TYPES",
    "CacheType",
    "LlamaCppSpeculative",
    "LlamaServerFlags",
    "extra_args_problems",
    "tensor_override_problem",
]

DEFAULT_IMAGE = DEFAULT_RUNTIME.image
GPU_RESOURCE = "amd.com/gpu"
"""The device plugin's extended resource a `device-plugin` pod requests when given none."""
RPC_PORT = 50052
"""rpc-server's default port (`-p`)."""
RPC_BINARY = "/app/ggml-rpc-server"
"""rpc-server inside llama.cpp's images (b11434 builds it as `ggml-rpc-server`)."""
LOAD_MARGIN = 1.5
"""The startup probe must outlast the load estimate by this factor: disks slow down when busy."""
DISK_READ_MIBPS = 300.0
"""Model volume read speed assumed when the caller gives none (a SATA SSD, busy)."""
INIT_SECONDS = 60
"""Start-up before the load assumed when the caller gives none."""
ReadMibps = Annotated[float, Field(gt=0)]
"""A read speed (MiB/s)."""
Seconds = Annotated[int, Field(ge=0)]
"""A duration in whole seconds."""
ProbeDelay = Annotated[int, Field(ge=0, le=86_400)]
"""Seconds before a probe's first try."""
ProbeSeconds = Annotated[int, Field(ge=1, le=86_400)]
"""Seconds between a probe's tries, or that one try may take."""
FailureThreshold = Annotated[int, Field(ge=1, le=100_000)]
"""Consecutive failures before a probe counts as failed."""


@documented
class LlamaCppRuntime(TypedDict):
    """A llama.cpp runtime: a named image of one build, its backend and what it can do."""

    name: Annotated[str, Field(pattern=NAME.pattern)]
    """Its name (the built-ins `vulkan`, `rocm` and `cpu` are the official images of b11434)."""
    image: ImageReference
    """Its image, pinned by a build tag or a digest."""
    backend: Literal["vulkan", "rocm", "cpu"]
    """`vulkan` (opens /dev/dri), `rocm` (/dev/kfd and /dev/dri) or `cpu` (no device: every
    layer on the host); it decides the devices, the environment and the device names the GPU
    gate reads."""
    capabilities: NotRequired[Annotated[list[Literal["rpc"]], Default([])]]
    """What the build can do beyond serving: `rpc` (configured with -DGGML_RPC: `--rpc`, and
    rpc-server in the image)."""
    digest: NotRequired[Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")] | None]
    """The digest the image is pinned to: the pod runs `image@digest`."""


def runtime_of(record: Mapping[str, Any]) -> Runtime:
    """The Runtime of a `runtime` input."""
    return Runtime(
        name=record["name"],
        image=record["image"],
        backend=record["backend"],
        capabilities=frozenset(record.get("capabilities") or ()),
        digest=record.get("digest"),
    )


def runtime_record(runtime: Runtime) -> LlamaCppRuntime:
    """A Runtime as the `runtime` input takes it."""
    record = {
        "name": runtime.name,
        "image": runtime.image,
        "backend": runtime.backend,
        "capabilities": sorted(runtime.capabilities),
    }
    if runtime.digest is not None:
        record["digest"] = runtime.digest
    return cast(LlamaCppRuntime, record)


def effective_runtime(args: Mapping[str, Any]) -> tuple[Runtime, bool, str | None]:
    """What runs a server's or worker's image (`runtimes.runtime_for`): its `runtime` with
    `image` in place of the runtime's own where that is allowed, or without a `runtime` the
    built-in the image's official tag names; whether the image decided it; the contradiction."""
    record = args.get("runtime")
    image = args.get("image")
    declared = runtime_of(record) if isinstance(record, Mapping) else None
    return runtime_for(image if isinstance(image, str) else None, declared)


def args_runtime(args: Mapping[str, Any]) -> Runtime:
    """The runtime a validated server's or worker's pod runs (what the builders read)."""
    return effective_runtime(args)[0]


@documented
class HttpProbe(TypedDict):
    """An HTTP GET probe."""

    path: NotRequired[Annotated[UrlPath, Default("/health")]]
    """Request path of the HTTP GET."""
    initial_delay_seconds: ProbeDelay
    """Seconds after start (or after the startup probe succeeded) before the first probe."""
    period_seconds: ProbeSeconds
    """Seconds between probes."""
    failure_threshold: FailureThreshold
    """Consecutive failures before the probe counts as failed."""
    timeout_seconds: NotRequired[Annotated[ProbeSeconds, Default(5)]]
    """Seconds one probe may take."""


@documented
class ServerProbes(TypedDict):
    """Startup, readiness and liveness probes of the server."""

    startup: NotRequired[
        Annotated[
            HttpProbe,
            Default({"initial_delay_seconds": 30, "period_seconds": 10, "failure_threshold": 177}),
        ]
    ]
    """Covers the model load: liveness and readiness start only once it succeeded; its window
    (initial delay + period x failure threshold) must outlast the load."""
    readiness: NotRequired[
        Annotated[
            HttpProbe,
            Default({"initial_delay_seconds": 30, "period_seconds": 10, "failure_threshold": 6}),
        ]
    ]
    """When the pod receives traffic."""
    liveness: NotRequired[
        Annotated[
            HttpProbe,
            Default({"initial_delay_seconds": 0, "period_seconds": 30, "failure_threshold": 5}),
        ]
    ]
    """When a hung server is restarted."""


class GpuAccessArgs(TypedDict):
    """How a pod of the server or of a worker reaches its GPU: the inputs both Args share."""

    gpu_device_path: NotRequired[Annotated[AbsolutePath, Default(DEFAULT_DRI_DEVICE)]]
    """Host path of the DRM render nodes mounted in `privileged` mode."""
    gpu_access: NotRequired[Annotated[GpuAccess, Default("privileged")]]
    """`privileged` + hostPath of the runtime's devices (/dev/dri; ROCm also /dev/kfd), or
    `device-plugin` (no privileges at all); a `cpu` runtime mounts nothing and runs unprivileged."""
    gpu_resource: NotRequired[Annotated[ExtendedResource, Default(GPU_RESOURCE)]]
    """Extended resource requested in `device-plugin` mode."""
    run_as_user: NotRequired[Annotated[RunAsUser, Default(DEFAULT_UID)]]
    """Non-root uid of the containers in `device-plugin` mode."""
    supplemental_groups: NotRequired[list[Annotated[int, Field(ge=0, le=2**31 - 1)]]]
    """Extra groups of the pod: the node's render group GID for a non-root Vulkan client."""


@documented
class LlamaCppVulkanServerArgs(GpuAccessArgs):
    """Inputs of LlamaCppVulkanServer."""

    namespace: NotRequired[Annotated[Input[DnsLabel], Default("default")]]
    """Namespace of the objects (may be a Namespace's output)."""
    image: ImageReference
    """Server image, pinned to a build (`server-vulkan-b11434`): the runtime's own image, or,
    for a built-in runtime, another build of its backend (from another repository: a custom
    build, taken to have `rpc`)."""
    runtime: NotRequired[LlamaCppRuntime]
    """What runs llama-server: its backend decides the devices mounted, the environment and the
    device names the GPU gate expects; its capabilities what the server may use (`rpc` for
    `flags.rpc`). Absent: the built-in runtime of the backend the official image's tag names
    (`server-rocm-b11434`: rocm), `vulkan` for any other image."""
    flags: LlamaServerFlags
    """llama-server flags."""
    model: ModelVolume
    """The model volume and its init check: a GgufModelStore's `model_volume` (or its outputs)."""
    node_selector: NotRequired[Annotated[dict[LabelKey, LabelValue], Default({})]]
    """Node labels the server pod must match (the GPU node)."""
    resources: dict[Literal["requests", "limits"], dict[ResourceName, Quantity]]
    """Container requests and limits (`{"requests": {...}, "limits": {...}}`)."""
    probes: NotRequired[Annotated[ServerProbes, Default({})]]
    """Startup, readiness and liveness probes of the server."""
    service_port: NotRequired[Port]
    """Port of the Service; absent: the server port."""
    node_port: NotRequired[NodePortNumber | None]
    """Reach the server from outside the cluster: the Service becomes a NodePort at this port
    on every node's address, with `externalTrafficPolicy: Local`, so kube-proxy hands the pod
    the client's own address and the NetworkPolicy's networks (`allowed_clients` cidrs) decide
    who gets in; absent: a ClusterIP Service, reached from inside the cluster only. Needs a
    NetworkPolicy with at least one cidr."""
    api_key: NotRequired[Input[str] | None]
    """`--api-key-file`: API key clients must send as a Bearer token; stored as a Kubernetes
    Secret, read from a file.
    """
    allowed_clients: NotRequired[list[NetworkClient] | None]
    """Who may reach the server (a NetworkPolicy); None creates no policy."""
    gpu_gate: NotRequired[Annotated[bool, Default(False)]]
    """Startup probe that passes only when the load log shows the layers on the runtime's
    device (`Vulkan0`, `ROCm0`; a `cpu` runtime: every layer on the host)."""
    verify_expectations: NotRequired[str | None]
    """Recorded expectations (`llm-infra verify --record`): a Job checks the answers after up."""
    verify_image: NotRequired[ImageReference]
    """Pinned stock Python image of the verify Job; absent: the model check's image."""
    disk_read_mibps: NotRequired[Annotated[ReadMibps, Default(DISK_READ_MIBPS)]]
    """Read speed of the model volume (MiB/s): with `init_seconds`, how long the load takes,
    which the startup probe must outlast (x1.5)."""
    init_seconds: NotRequired[Annotated[Seconds, Default(INIT_SECONDS)]]
    """Start-up time before the load (seconds: image start, the model check)."""
    min_decode_tps: NotRequired[TokensPerSecond | None]
    """Decode-speed floor the verify Job enforces (tok/s): catches a silent CPU fallback; also
    the floor of the LlmDecodeBelowFloor alert."""
    metrics: NotRequired[KubernetesMonitoring | None]
    """`--metrics`, who may scrape, and the monitor, alert rules and dashboard; None: no metrics."""
    extra_args: NotRequired[ExtraArgs | None]
    """Further llama-server b11434 arguments, appended as argv words after the rendered flags
    (e.g. `["--n-cpu-moe", "20", "-ub", "1024"]`). Each option must be one llama-server knows,
    with its value; an option the program renders (`-c`, `-ngl`, `--port`, ... in any spelling)
    is refused, naming the input that sets it."""
    stop_before_model_change: NotRequired[Annotated[bool, Default(False)]]
    """`store.upgrade: replace`: a new model deletes the Deployment (its pods gone) before it is
    created again, so the store's fetch Job, made to wait for this server, never deletes files
    the old server still maps; `pulumi up` then waits for the fetch, not for the new pod (so
    no verify_expectations: the check would run before the server is up)."""


@documented
class LlamaCppRpcWorkerArgs(GpuAccessArgs):
    """Inputs of LlamaCppRpcWorker."""

    namespace: NotRequired[Annotated[Input[DnsLabel], Default("default")]]
    """Namespace of the worker's objects (the server's: its policy admits pods of it)."""
    image: ImageReference
    """Image holding rpc-server, the same llama.cpp build as the server's, with -DGGML_RPC=ON."""
    runtime: NotRequired[LlamaCppRuntime]
    """The runtime of that image: it must declare `rpc`; its backend decides the devices
    mounted. Absent: as the server's."""
    head: DnsLabel
    """Name of the server (the head) this worker serves: labels its objects."""
    head_pod_labels: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    """Labels of the head's pods: the only pods the worker's NetworkPolicy admits (never empty:
    that would admit every pod of the namespace to an rpc-server without authentication)."""
    node_selector: dict[LabelKey, LabelValue]
    """Node labels the pod must match (the worker's GPU node)."""
    resources: dict[Literal["requests", "limits"], dict[ResourceName, Quantity]]
    """Container requests and limits (`{"requests": {...}, "limits": {...}}`)."""
    binary: NotRequired[Annotated[AbsolutePath, Default(RPC_BINARY)]]
    """rpc-server inside the image."""
    port: NotRequired[Annotated[Port, Default(RPC_PORT)]]
    """rpc-server's port, of the container and the Service."""
    threads: NotRequired[Threads | None]
    """`-t`: CPU threads of rpc-server; absent: rpc-server's own count."""


def startup_threshold_needed(probe: HttpProbe, load_seconds: float) -> int | None:
    """The failure_threshold a startup probe needs to outlast a load (x LOAD_MARGIN), or None
    when it already does. The stack file's plan and the server's own check both ask this."""
    needed = load_seconds * LOAD_MARGIN
    window = probe["initial_delay_seconds"] + probe["period_seconds"] * probe["failure_threshold"]
    if window >= needed:
        return None
    return math.ceil((needed - probe["initial_delay_seconds"]) / probe["period_seconds"])


@cross_field_rule(LlamaCppVulkanServerArgs)
def _server_fits_its_store(args: Mapping[str, Any]) -> list[Problem]:
    """Rules between a server and its store's model volume (both doors: they check the args)."""
    problems: list[Problem] = []
    model, flags = args.get("model"), args.get("flags", {})
    if not isinstance(model, Mapping):
        return problems
    draft_file = model.get("draft_file")
    spec = flags.get("speculative") or {}
    draft_path = f"{MODELS_MOUNT}/{DRAFT_DIR}/{draft_file}"
    if isinstance(draft_file, str) and spec.get("draft_model_path") not in (None, draft_path):
        problems.append(
            (
                ("flags", "speculative", "draft_model_path"),
                f"{spec.get('draft_model_path')!r} is not the store's draft {draft_path}",
            )
        )
    model_file = model.get("model_file")
    if isinstance(model_file, str) and flags.get("model_path") != f"{MODELS_MOUNT}/{model_file}":
        problems.append(
            (
                ("flags", "model_path"),
                f"{flags.get('model_path')!r} is not the store's first file "
                f"{MODELS_MOUNT}/{model_file} (llama-server loads the other shards from it)",
            )
        )
    size = model.get("model_bytes")
    probes = args["probes"]
    startup = probes.get("startup") if isinstance(probes, Mapping) else None
    if isinstance(size, int) and isinstance(startup, Mapping):
        read, init = args["disk_read_mibps"], args["init_seconds"]
        load = size / (read * 2**20) + init
        threshold = startup_threshold_needed(startup, load)  # type: ignore[arg-type]
        if threshold is not None:
            problems.append(
                (
                    ("probes", "startup", "failure_threshold"),
                    f"{startup['failure_threshold']} allows the load too little time: reading "
                    f"{size / 2**30:.1f} GiB at {read:g} MiB/s plus {init}s "
                    f"takes ~{load:.0f}s; raise it to at least {threshold} (x{LOAD_MARGIN} margin)",
                )
            )
    return problems


@cross_field_rule(LlamaCppVulkanServerArgs)
def _speculative_settings_fit_the_method(args: Mapping[str, Any]) -> list[Problem]:
    """A draft model for the methods that load one and for no other; draft settings only where
    a draft proposes tokens; no fewer tokens required than drafted."""
    flags = args.get("flags")
    if not isinstance(flags, Mapping) or not isinstance(flags.get("speculative"), Mapping):
        return []
    return [
        (("flags", "speculative", *loc), message)
        for loc, message in speculative_problems(flags["speculative"], flags.get("model_path"))
    ]


def speculative_problems(spec: Mapping[str, Any], model_path: object) -> list[Problem]:
    """The problems of a `speculative` input (locations relative to it)."""
    method, draft = spec.get("method"), spec.get("draft_model_path")
    problems: list[Problem] = []
    if method in DRAFT_MODEL_TYPES and not draft:
        problems.append(
            (("draft_model_path",), f"{method!r} drafts with a model of its own: name its file")
        )
    elif method not in DRAFT_MODEL_TYPES and draft:
        how = "the model's own MTP layers" if method == "draft-mtp" else "no model"
        problems.append(
            (("draft_model_path",), f"{method!r} drafts with {how}: drop the draft model")
        )
    if draft and draft == model_path:
        problems.append((("draft_model_path",), "is the served model itself (-m)"))
    if isinstance(method, str) and method.startswith("ngram-"):
        problems += [
            (
                (key,),
                f"applies to the draft methods; {method!r} proposes from an n-gram cache "
                "(its --spec-ngram-* settings are extra args)",
            )
            for key in ("num_speculative_tokens", "min_speculative_tokens", "min_probability")
            if spec.get(key) is not None
        ]
    most, least = spec.get("num_speculative_tokens"), spec.get("min_speculative_tokens")
    if isinstance(most, int) and isinstance(least, int) and least > most:
        problems.append(
            (("min_speculative_tokens",), f"{least} is more than the {most} tokens drafted")
        )
    return problems


@cross_field_rule(LlamaCppVulkanServerArgs)
def _no_check_of_a_server_not_awaited(args: Mapping[str, Any]) -> list[Problem]:
    """A server stopped before a model change is not awaited: a post-up check would run early."""
    if args.get("stop_before_model_change") is True and args.get("verify_expectations"):
        return [
            (
                ("verify_expectations",),
                f"is set while {ref('stop_before_model_change')} stops the server before a "
                "model change: the new server is not awaited (it waits for the fetch that "
                "follows it), so the check would run before it is up (drop one of them; "
                "`llm-infra verify` checks by hand)",
            )
        ]
    return []


@cross_field_rule(LlamaCppVulkanServerArgs)
def _metrics_port_of_its_own(args: Mapping[str, Any]) -> list[Problem]:
    """The metrics proxy listens in the server's pod: its port cannot be the server's."""
    metrics, flags = args.get("metrics"), args.get("flags", {})
    if not isinstance(metrics, Mapping) or not isinstance(flags, Mapping):
        return []
    port = metrics["port"]
    if port == flags.get("port"):
        return [
            (
                ("metrics", "port"),
                f"{port} is llama-server's port; the metrics proxy beside it needs a port of its "
                "own (scrapers are admitted to that port only)",
            )
        ]
    return []


def runtime_problems(args: Mapping[str, Any], rpc_role: str | None) -> list[Problem]:
    """A server's or worker's image and runtime: the image is one the runtime may run, `rpc`
    declared where the pod needs it (`rpc_role`: why it does; None: it does not), no GPU asked
    of a runtime without one."""
    runtime, replaced, contradiction = effective_runtime(args)
    if contradiction is not None:
        return [(("image",), contradiction)]
    problems: list[Problem] = []
    missing = None if rpc_role is None else missing_capability(runtime, RPC, replaced)
    if missing is not None:
        problems.append((("image",) if replaced else ("runtime",), f"{missing}{rpc_role}"))
    if not runtime.uses_gpu and args.get("gpu_access") == "device-plugin":
        problems.append(
            (
                ("gpu_access",),
                f"'device-plugin' asks the node for a GPU, but {ref('runtime')} "
                f"{runtime.name!r} runs on the CPU only (drop it: the pod mounts no device)",
            )
        )
    return problems


@cross_field_rule(LlamaCppRpcWorkerArgs)
def worker_runtime_problems(args: Mapping[str, Any]) -> list[Problem]:
    """rpc-server exists only in a build with the RPC backend: by the runtime's declared
    capabilities (components/llamacpp/runtimes.py), never by how the image name is spelt."""
    return runtime_problems(args, rpc_role="")


@cross_field_rule(LlamaCppVulkanServerArgs)
def server_runtime_problems(args: Mapping[str, Any]) -> list[Problem]:
    """A head with `--rpc` needs the RPC backend in its own build too; a runtime without a GPU
    offloads no layer (llama-server ignores -ngl there, and the gate expects none on a GPU)."""
    flags = args.get("flags")
    flags = flags if isinstance(flags, Mapping) else {}
    head = f" (the head of a split model: {ref('flags', 'rpc')})"
    problems = runtime_problems(args, rpc_role=head if flags.get("rpc") else None)
    runtime, _, contradiction = effective_runtime(args)
    layers = flags.get("gpu_layers")
    if contradiction is None and not runtime.uses_gpu and isinstance(layers, int) and layers:
        problems.append(
            (
                ("flags", "gpu_layers"),
                f"{layers} layers for a GPU, but {ref('runtime')} {runtime.name!r} runs on the "
                "CPU only (llama-server ignores -ngl without a GPU backend): set 0",
            )
        )
    return problems


@cross_field_rule(LlamaCppVulkanServerArgs)
def _an_exposed_server_admits_named_networks_only(args: Mapping[str, Any]) -> list[Problem]:
    """A NodePort is reached from outside: without a NetworkPolicy any address would get in,
    and with one that names no network none would."""
    if args.get("node_port") is None:
        return []
    clients = args.get("allowed_clients")
    if clients is None:
        return [
            (
                ("node_port",),
                f"exposes the server outside the cluster with no NetworkPolicy (every address "
                f"would reach it): set {ref('allowed_clients')} with the networks to admit",
            )
        ]
    if not any(isinstance(c, Mapping) and "cidr" in c for c in clients):
        return [
            (
                ("node_port",),
                f"exposes the server outside the cluster, but {ref('allowed_clients')} names no "
                "network (cidr), so no outside client would be admitted: add the clients' CIDRs",
            )
        ]
    return []


@cross_field_rule(LlamaCppVulkanServerArgs)
def _extra_args_are_llama_server_options(args: Mapping[str, Any]) -> list[Problem]:
    """Extra words: options llama-server b11434 knows, none the program renders, with values."""
    words, flags = args.get("extra_args"), args.get("flags")
    if not isinstance(words, list):
        return []
    cache_v = flags.get("cache_type_v") if isinstance(flags, Mapping) else None
    gate = args.get("gpu_gate") is True
    return located(extra_args_problems(words, cache_v, gate), "extra_args")
