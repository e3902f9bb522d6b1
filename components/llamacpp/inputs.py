"""Inputs of LlamaCppVulkanServer and LlamaCppRpcWorker: flags, probes, Args, with their rules.

Every rule for these inputs lives here; the builders take them validated.
"""

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, TypedDict, cast, get_args

from pydantic import Field

from components.extra_args import (
    ExtraArgs,
    llama_server_options,
    located,
    owned_spellings,
    parse_extra_args,
)
from components.grammars import (
    AbsolutePath,
    DnsLabel,
    ExtendedResource,
    ImageReference,
    IpAddress,
    LabelKey,
    LabelValue,
    ModelName,
    Port,
    Quantity,
    ResourceName,
    RpcEndpoint,
    UrlPath,
)
from components.k8s.network_policies import NetworkClient
from components.k8s.pod_security import DEFAULT_DRI_DEVICE, DEFAULT_UID
from components.llamacpp.runtimes import (
    DEFAULT_RUNTIME,
    NAME,
    RPC,
    Runtime,
    missing_capability,
    runtime_for,
)
from components.model_store.inputs import MODELS_MOUNT, ModelVolume
from components.monitoring.inputs import KubernetesMonitoring
from components.validation import Default, Input, Problem, cross_field_rule, documented, ref

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


CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


CACHE_TYPES: tuple[str, ...] = get_args(CacheType)


@documented
class LlamaServerFlags(TypedDict):
    """llama-server flags, one typed field per flag (b11434 names in the docstrings)."""

    model_path: AbsolutePath
    """`-m`: model file, the first shard; llama.cpp loads `-0000N-of-0000M` from the same folder."""
    alias: ModelName
    """`--alias`: name in `GET /v1/models`; must match LiteLLM's `model_name` for this server."""
    host: IpAddress
    """`--host`: bind address; `0.0.0.0` so the Service reaches the pod."""
    port: Port
    """`--port`: listen port (containerPort and Service targetPort)."""
    jinja: bool
    """`--jinja`: use the chat template in the GGUF (reasoning comes back in
    `reasoning_content`)."""
    gpu_layers: Annotated[int, Field(ge=0, le=100_000)]
    """`-ngl`: GPU layers. llama.cpp offloads the output layer first: N = output + N-1 layers."""
    ctx_size: Annotated[int, Field(ge=1)]
    """`-c`: total KV-cache context, shared by the slots."""
    parallel: Annotated[int, Field(ge=1, le=1024)]
    """`-np`: parallel slots; each gets `-c / -np` tokens."""
    cont_batching: bool
    """`--cont-batching` (or `--no-cont-batching`): continuous batching across slots."""
    cache_type_k: CacheType
    """`--cache-type-k`: K cache type, one of CACHE_TYPES (deepseek4 needs K = V)."""
    cache_type_v: CacheType
    """`--cache-type-v`: V cache type, one of CACHE_TYPES."""
    temperature: Annotated[float, Field(ge=0, le=100)]
    """`--temp`: sampling temperature of the requests that set none (clients may override)."""
    top_p: Annotated[float, Field(gt=0, le=1)]
    """`--top-p`: nucleus-sampling threshold of the requests that set none."""
    top_k: NotRequired[Annotated[int, Field(ge=0, le=1_000_000)] | None]
    """`--top-k`: sample from the k most likely tokens, for the requests that set none (0: all
    tokens; omitted: llama-server's 40)."""
    min_p: NotRequired[Annotated[float, Field(ge=0, le=1)] | None]
    """`--min-p`: drop tokens less likely than this share of the most likely one, for the
    requests that set none (0: off; omitted: llama-server's 0.05)."""
    threads: Annotated[int, Field(ge=1, le=4096)]
    """`--threads`: CPU threads: sampling and the CPU-resident layers."""
    cache_ram_mib: NotRequired[Annotated[int, Field(ge=0)] | None]
    """`--cache-ram`: prompt cache in host RAM (MiB), counted against the container limit (omitted:
    llama-server's 8192).
    """
    log_verbosity: NotRequired[Annotated[int, Field(ge=0, le=4)] | None]
    """`-lv`: log verbosity; 4 writes the `load_tensors` offload lines the GPU gate reads."""
    log_file: NotRequired[AbsolutePath | None]
    """`--log-file`: load log for the GPU gate's startup probe."""
    rpc: NotRequired[list[RpcEndpoint] | None]
    """`--rpc`: the workers' rpc-servers (`host:port`), whose GPUs take a share of the layers;
    llama.cpp puts them before the local GPU."""
    tensor_split: NotRequired[list[Annotated[float, Field(ge=0)]] | None]
    """`--tensor-split`: each device's share of the offloaded layers (the RPC workers, then the
    local GPU), as the memory plan computed it."""
    metrics: NotRequired[Annotated[bool, Default(False)]]
    """`--metrics`: Prometheus metrics (`llamacpp:*`) at /metrics, behind the API key when set
    (scrapers reach them through the metrics proxy's port)."""
    repack: NotRequired[Annotated[bool, Default(True)]]
    """False: `--no-repack`, CPU-resident weights stay in the model buffer (no CPU_REPACK or
    AMX buffers); True: llama-server repacks (its own behaviour, no flag)."""


FLAG_OPTIONS: dict[str, str] = {
    "model_path": "-m",
    "alias": "--alias",
    "host": "--host",
    "port": "--port",
    "jinja": "--jinja",
    "gpu_layers": "-ngl",
    "ctx_size": "-c",
    "parallel": "-np",
    "cont_batching": "--cont-batching",
    "cache_type_k": "--cache-type-k",
    "cache_type_v": "--cache-type-v",
    "temperature": "--temp",
    "top_p": "--top-p",
    "top_k": "--top-k",
    "min_p": "--min-p",
    "threads": "--threads",
    "rpc": "--rpc",
    "tensor_split": "--tensor-split",
    "cache_ram_mib": "--cache-ram",
    "log_verbosity": "-lv",
    "log_file": "--log-file",
    "metrics": "--metrics",
    "repack": "--no-repack",
}
"""The option each field of LlamaServerFlags renders (`llama_server_args` writes exactly these):
every spelling of these options is the program's, never an extra argument."""
API_KEY_OPTION = "--api-key-file"
"""The option the API key is rendered as (a file from its Secret)."""
MODEL_PRESETS = (
    "--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default",
    "--fim-qwen-7b-default", "--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default",
    "--gpt-oss-20b-default", "--gpt-oss-120b-default", "--vision-gemma-4b-default",
    "--vision-gemma-12b-default",
)  # fmt: skip
"""llama-server's presets that load (and download) a model of their own."""
OWNED_OPTIONS: dict[str, tuple[str, ...]] = {
    **{option: ("flags", field) for field, option in FLAG_OPTIONS.items()},
    API_KEY_OPTION: ("api_key",),
    "--api-key": ("api_key",),
    # Other sources of the model: the model is the store's (its first shard is -m).
    "-mu": ("flags", "model_path"),
    "-hf": ("flags", "model_path"),
    "-hff": ("flags", "model_path"),
    "-dr": ("flags", "model_path"),
    "--models-dir": ("flags", "model_path"),
    "--models-preset": ("flags", "model_path"),
    # Presets that name a model of their own (and download it).
    **dict.fromkeys(MODEL_PRESETS, ("flags", "model_path")),
}
"""Every option the program sets (one spelling each) → the input it comes from."""
REFUSED_OPTIONS: dict[str, str] = {
    "--hf-token": "a secret in argv is visible in the pod spec and to every process; the "
    "model comes from the store, which holds the token",
    "--help": "llama-server prints and exits instead of serving",
    "--version": "llama-server prints and exits instead of serving",
    "--list-devices": "llama-server prints and exits instead of serving",
    "--completion-bash": "llama-server prints and exits instead of serving",
    "--cache-list": "llama-server prints and exits instead of serving",
    "--ssl-key-file": "llama-server would speak HTTPS, which the probes, the Service's clients "
    "and the metrics proxy do not",
    "--ssl-cert-file": "llama-server would speak HTTPS, which the probes, the Service's clients "
    "and the metrics proxy do not",
    "--api-prefix": "it moves every endpoint, the probes' /health included",
}
"""Options llama-server knows that a deployment must not pass, each with the reason."""


TENSOR_OVERRIDE_OPTIONS = ("--override-tensor", "--spec-draft-override-tensor")
"""Options whose value is `PATTERN=BUFFER[,PATTERN=BUFFER...]` (llama.cpp splits it at commas
and each part at its first `=`; a part without one stops llama-server at start)."""


UNQUANTIZED_CACHE_TYPES = ("f32", "f16", "bf16")


def extra_args_problems(
    words: list[str], cache_type_v: str | None = None, gpu_gate: bool = False
) -> list[Problem]:
    """The problems of llama-server extra words (locations relative to the words; a message
    names another input with `ref`, relative to the server's args)."""
    table = llama_server_options()
    owned = owned_spellings(table, OWNED_OPTIONS)
    parsed, problems = parse_extra_args(words, table, owned, REFUSED_OPTIONS)
    for arg in parsed:
        if arg.option.name in TENSOR_OVERRIDE_OPTIONS:
            problem = tensor_override_problem(arg.values[0])
            if problem:
                problems.append(((arg.index + 1,), problem))
        if gpu_gate and arg.option.name == "--log-disable":
            problems.append(
                (
                    (arg.index,),
                    f"silences the load log that {ref('gpu_gate')} reads: the startup probe "
                    "would never pass (drop one of them)",
                )
            )
        quantized_v = cache_type_v is not None and cache_type_v not in UNQUANTIZED_CACHE_TYPES
        if arg.option.name == "--flash-attn" and arg.values == ("off",) and quantized_v:
            problems.append(
                (
                    (arg.index + 1,),
                    f"'off' with the quantized V cache {cache_type_v!r} of "
                    f"{ref('flags', 'cache_type_v')}: llama-server b11434 refuses to start "
                    "(a quantized V cache needs flash attention)",
                )
            )
    return problems


_NOT_ECMASCRIPT = re.compile(r"\(\?[^:=!]|\\[AZzG]")
"""Regex syntax Python reads and llama.cpp's std::regex (ECMAScript) does not: lookbehind,
named groups, inline flags, `\\A`/`\\Z` anchors."""


def tensor_override_problem(value: str) -> str | None:
    """What keeps llama-server (or the plan) from reading a tensor override value, or None."""
    for part in value.split(","):
        pattern, equals, buffer = part.partition("=")
        if not pattern or not equals or not buffer:
            return (
                f"{part!r} is not PATTERN=BUFFER (e.g. 'blk\\.1[0-9]\\.ffn_.*=CPU'; llama.cpp "
                "splits the value at commas, so a pattern has none)"
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"{pattern!r} is not a regular expression ({exc})"
        if _NOT_ECMASCRIPT.search(pattern):
            return (
                f"{pattern!r} uses syntax llama.cpp's ECMAScript regex does not read "
                "(lookbehind, named groups, inline flags, \\A or \\Z)"
            )
    return None


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

    path: UrlPath
    """Request path, e.g. `/health`."""
    initial_delay_seconds: Annotated[int, Field(ge=0, le=86_400)]
    """Seconds after start (or after the startup probe succeeded) before the first probe."""
    period_seconds: Annotated[int, Field(ge=1, le=86_400)]
    """Seconds between probes."""
    failure_threshold: Annotated[int, Field(ge=1, le=100_000)]
    """Consecutive failures before the probe counts as failed."""
    timeout_seconds: Annotated[int, Field(ge=1, le=86_400)]
    """Seconds one probe may take."""


@documented
class ServerProbes(TypedDict):
    """Startup, readiness and liveness probes of the server."""

    startup: HttpProbe
    """Covers the model load: liveness and readiness only start once it succeeded."""
    readiness: HttpProbe
    """When the pod receives traffic."""
    liveness: HttpProbe
    """When a hung server is restarted."""


@documented
class LlamaCppVulkanServerArgs(TypedDict):
    """Inputs of LlamaCppVulkanServer."""

    namespace: Input[DnsLabel]
    """Namespace of the Deployment and Service (may be a Namespace's output)."""
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
    node_selector: dict[LabelKey, LabelValue]
    """Node labels the pod must match (the GPU node)."""
    resources: dict[Literal["requests", "limits"], dict[ResourceName, Quantity]]
    """Container requests and limits (`{"requests": {...}, "limits": {...}}`)."""
    probes: ServerProbes
    """Startup, readiness and liveness probes."""
    service_port: NotRequired[Port]
    """Port of the Service; absent: the server port."""
    gpu_device_path: NotRequired[Annotated[AbsolutePath, Default(DEFAULT_DRI_DEVICE)]]
    """Host path of the DRM render nodes mounted in `privileged` mode."""
    gpu_access: NotRequired[
        Annotated[Literal["privileged", "device-plugin"], Default("privileged")]
    ]
    """`privileged` + hostPath of the runtime's devices (/dev/dri; ROCm also /dev/kfd), or
    `device-plugin` (no privileges at all); a `cpu` runtime mounts nothing and runs unprivileged."""
    gpu_resource: NotRequired[Annotated[ExtendedResource, Default(GPU_RESOURCE)]]
    """Extended resource requested in `device-plugin` mode."""
    run_as_user: NotRequired[Annotated[int, Field(ge=1, le=2**31 - 1), Default(DEFAULT_UID)]]
    """Non-root uid in `device-plugin` mode."""
    supplemental_groups: NotRequired[list[Annotated[int, Field(ge=0, le=2**31 - 1)]]]
    """Extra groups of the pod: the node's render group GID for a non-root Vulkan client."""
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
    disk_read_mibps: NotRequired[Annotated[float, Field(gt=0), Default(DISK_READ_MIBPS)]]
    """Read speed of the model volume (MiB/s): with `init_seconds`, how long the load takes,
    which the startup probe must outlast (x1.5)."""
    init_seconds: NotRequired[Annotated[int, Field(ge=0), Default(INIT_SECONDS)]]
    """Start-up time before the load (seconds: image start, the model check)."""
    min_decode_tps: NotRequired[Annotated[float, Field(gt=0)] | None]
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
class LlamaCppRpcWorkerArgs(TypedDict):
    """Inputs of LlamaCppRpcWorker."""

    namespace: Input[DnsLabel]
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
    threads: NotRequired[Annotated[int, Field(ge=1, le=4096)] | None]
    """`-t`: CPU threads of rpc-server; absent: rpc-server's own count."""
    gpu_device_path: NotRequired[Annotated[AbsolutePath, Default(DEFAULT_DRI_DEVICE)]]
    """Host path of the DRM render nodes mounted in `privileged` mode."""
    gpu_access: NotRequired[
        Annotated[Literal["privileged", "device-plugin"], Default("privileged")]
    ]
    """`privileged` + hostPath of the runtime's devices (/dev/dri; ROCm also /dev/kfd), or
    `device-plugin` (no privileges at all); a `cpu` runtime mounts nothing and runs unprivileged."""
    gpu_resource: NotRequired[Annotated[ExtendedResource, Default(GPU_RESOURCE)]]
    """Extended resource requested in `device-plugin` mode."""
    run_as_user: NotRequired[Annotated[int, Field(ge=1, le=2**31 - 1), Default(DEFAULT_UID)]]
    """Non-root uid in `device-plugin` mode."""
    supplemental_groups: NotRequired[list[Annotated[int, Field(ge=0, le=2**31 - 1)]]]
    """Extra groups of the pod: the node's render group GID for a non-root Vulkan client."""


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
    startup = args.get("probes", {}).get("startup")
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
def _extra_args_are_llama_server_options(args: Mapping[str, Any]) -> list[Problem]:
    """Extra words: options llama-server b11434 knows, none the program renders, with values."""
    words, flags = args.get("extra_args"), args.get("flags")
    if not isinstance(words, list):
        return []
    cache_v = flags.get("cache_type_v") if isinstance(flags, Mapping) else None
    gate = args.get("gpu_gate") is True
    return located(extra_args_problems(words, cache_v, gate), "extra_args")
