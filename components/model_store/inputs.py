"""Inputs of GgufModelStore (and the ModelVolume it gives a server), with their rules.

Every rule for these inputs lives here; the builders take them validated.
"""

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import Field

from components.grammars import (
    AbsolutePath,
    DnsLabel,
    FileName,
    FilePattern,
    HttpUrl,
    ImageReference,
    LabelKey,
    LabelValue,
    Quantity,
    RepoId,
    Revision,
    StorageClass,
)
from components.k8s.pod_security import DEFAULT_DRI_DEVICE, DEFAULT_UID, GpuAccess, RunAsUser
from components.payloads.fetcher import ModelFile, token_over_http_problem
from components.validation import Default, Input, Problem, cross_field_rule, documented

CpuVariant = Literal[
    "x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell", "skylakex", "cannonlake",
    "cascadelake", "icelake", "cooperlake", "zen4", "alderlake", "sapphirerapids",
]  # fmt: skip
"""ggml's x86 CPU backend variants (`ggml/src/CMakeLists.txt` lines 493-517, b11434); their
features are `infra.cpus.CPU_VARIANTS`'s."""


GpuMemoryGib = Annotated[float, Field(gt=0)]
"""GPU memory (GiB)."""


@documented
class NodePreflight(TypedDict):
    """What the node preflight checks before the model is downloaded."""

    image: ImageReference
    """The server image: its llama-server lists the Vulkan devices the server will see."""
    gpu_access: NotRequired[Annotated[GpuAccess, Default("privileged")]]
    """`privileged`: mounts the render nodes and checks them and the Vulkan device;
    `device-plugin`: the plugin hands the GPU only to the server, so only sysfs and the disk."""
    min_gpu_memory_gib: NotRequired[GpuMemoryGib | None]
    """GPU memory the memory plan counts on (`memory.vramGib`): VRAM + GTT must reach it."""
    gpu_device_path: NotRequired[Annotated[AbsolutePath, Default(DEFAULT_DRI_DEVICE)]]
    """Host path of the DRM render nodes."""
    cpu_variant: NotRequired[CpuVariant | None]
    """The ggml CPU variant the memory plan counts on (`memory.nodeCpu`): the preflight fails
    when the server image's llama-server loads another on this node. Always reported."""


MODELS_MOUNT = "/models"
"""Where pods mount the model volume (the fetch Job, the server, its model check)."""
FETCH_IMAGE = "python:3.12.8-slim-bookworm"
"""The pinned stock Python image the stack files run the fetcher in when they name none."""
PARALLEL_DOWNLOADS = 3
"""Model files downloaded at once when the caller gives no number."""
ParallelDownloads = Annotated[int, Field(ge=1, le=16)]
"""Model files downloaded at once."""
FETCH_TIMEOUT_SECONDS = 12 * 3600
"""Deadline of a fetch when the caller gives none: 87 GiB over a slow home link."""


DRAFT_DIR = "draft"
"""The volume's folder a speculative draft model is fetched into: its own lock, its own
completion marker, and never a file the model's fetch retires or replaces."""


@documented
class DraftModel(TypedDict):
    """A speculative draft model the store fetches beside the model, into `draft/`."""

    repo: RepoId
    """Hugging Face repo id of the draft (it may be the model's own repo)."""
    revision: Revision
    """Branch, tag or commit sha to fetch."""
    files: Annotated[list[ModelFile], Field(min_length=1)]
    """The draft's files, first shard first."""


@documented
class ModelVolume(TypedDict):
    """Where a server finds its model: what a GgufModelStore provides."""

    claim_name: DnsLabel
    """The models PVC."""
    fetcher_config_map: DnsLabel
    """ConfigMap with the fetcher and lock, for the server's init check."""
    check_image: ImageReference
    """Image that runs the init check (the store's fetch image)."""
    run_as_user: RunAsUser
    """Non-root uid of the init check."""
    model_file: NotRequired[FileName]
    """The store's first file: the server's `-m` must be `/models/<model_file>`."""
    model_bytes: NotRequired[Annotated[int, Field(ge=0)] | None]
    """Bytes of the model files when the lock gives every size: the server's startup probe
    must outlast reading them."""
    draft_file: NotRequired[FileName]
    """The draft's first file, when the store fetches one: the server's `--spec-draft-model`
    must be `/models/draft/<draft_file>`."""


@documented
class GgufModelStoreArgs(TypedDict):
    """Inputs of GgufModelStore."""

    namespace: NotRequired[Annotated[Input[DnsLabel], Default("default")]]
    """Namespace of the PVC, ConfigMap, Secret and Job (may be a Namespace's output)."""
    repo: RepoId
    """Hugging Face repo id, e.g. `unsloth/DeepSeek-V4-Flash-0731-GGUF`."""
    revision: NotRequired[Annotated[Revision, Default("main")]]
    """Branch, tag or commit of the repo to fetch (`llm-infra lock` pins a commit)."""
    files: Annotated[list[ModelFile], Field(min_length=1)]
    """The files of the model, first shard first."""
    volume_size: Quantity
    """PVC size as a Kubernetes quantity (`120Gi`): the model plus room for the next one."""
    storage_class: NotRequired[Annotated[Input[StorageClass], Default("local-path")]]
    """StorageClass of the model volume's claim (k3s: `local-path`, bound to one node)."""
    node_selector: NotRequired[Annotated[dict[LabelKey, LabelValue], Default({})]]
    """Where the Job runs: the server's node, since a local-path volume is node-bound."""
    fetch_image: NotRequired[Annotated[ImageReference, Default(FETCH_IMAGE)]]
    """A pinned stock Python image that runs the fetcher (standard library only)."""
    retired_patterns: NotRequired[Annotated[list[FilePattern], Default([])]]
    """Glob patterns of retired model files on the volume to delete (never a file of this model;
    no `/`, and no leading `-`, which would read as a flag)."""
    parallel_downloads: NotRequired[Annotated[ParallelDownloads, Default(PARALLEL_DOWNLOADS)]]
    """Files downloaded at once."""
    fetch_timeout_seconds: NotRequired[
        Annotated[int, Field(ge=60, le=30 * 86_400), Default(FETCH_TIMEOUT_SECONDS)]
    ]
    """Deadline of the fetch Job (12 h: 87 GiB over a slow home link)."""
    hf_endpoint: NotRequired[HttpUrl | None]
    """Hub endpoint (a mirror); absent or None: huggingface.co."""
    hf_token: NotRequired[Input[str] | None]
    """HF token for gated or private repos; stored as a Kubernetes Secret, never in argv or env."""
    allow_token_over_http: NotRequired[Annotated[bool, Default(False)]]
    """Send hf_token to a plain-http hf_endpoint other than loopback (a mirror on a trusted
    network); False: such an endpoint with a token is refused."""
    network_policy: NotRequired[Annotated[bool, Default(True)]]
    """Restrict the fetch pod to DNS and the hub's port."""
    run_as_user: NotRequired[Annotated[RunAsUser, Default(DEFAULT_UID)]]
    """Non-root uid of the fetch and check containers."""
    upgrade: NotRequired[Annotated[Literal["keep", "replace"], Default("keep")]]
    """`keep`: on a new lock the old model stays until the new one is verified;
    `replace`: retired files go first when the volume cannot hold both (downtime)."""
    node_preflight: NotRequired[NodePreflight | None]
    """Check the node (render node, VRAM + GTT, disk, Vulkan device) in a Job before the fetch."""
    draft: NotRequired[DraftModel | None]
    """A speculative draft model fetched after the model, into `draft/` on the same volume
    (checked by its own lock and marker, before the server starts, as the model is)."""


@cross_field_rule(GgufModelStoreArgs)
def _retired_patterns_spare_the_model(args: Mapping[str, Any]) -> list[Problem]:
    names = [file["name"] for file in args.get("files", [])]
    return [
        (("retired_patterns", index), f"{pattern!r} matches {hit!r}, a file of this model")
        for index, pattern in enumerate(args["retired_patterns"])
        for hit in [next((n for n in names if fnmatchcase(n, pattern)), None)]
        if hit is not None
    ]


@cross_field_rule(GgufModelStoreArgs)
def _token_stays_off_plain_http(args: Mapping[str, Any]) -> list[Problem]:
    endpoint = args.get("hf_endpoint")
    problem = token_over_http_problem(
        endpoint if isinstance(endpoint, str) else None,
        args.get("hf_token") is not None,
        args["allow_token_over_http"] is True,
    )
    return [] if problem is None else [(("hf_endpoint",), problem)]
