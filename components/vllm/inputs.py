"""Inputs of VllmRocmServer: SSH connection, model lock, flags, Caddy site, host needs.

Every rule for these inputs lives here; the builders take them validated.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pulumi
from pydantic import Field

from components import option_categories
from components.addresses import covers_every_address
from components.extra_args import (
    ExtraArgs,
    located,
    owned_spellings,
    parse_extra_args,
    vllm_serve_options,
)
from components.grammars import (
    AbsolutePath,
    Cidr,
    DnsLabel,
    Email,
    EnvFileSecret,
    FilePattern,
    Identifier,
    ImageReference,
    IpAddress,
    ModelName,
    PatchSource,
    Port,
    RepoId,
    Revision,
    Sha256,
    SiteAddress,
    SshHostKey,
    SshUser,
)
from components.model_store.inputs import FETCH_IMAGE, PARALLEL_DOWNLOADS, ParallelDownloads
from components.monitoring.inputs import (
    SCRAPE_INTERVAL_SECONDS,
    AlertThresholds,
    ReferenceSpeeds,
    ScrapeSeconds,
    TokensPerSecond,
)
from components.payloads.fetcher import ModelFile
from components.validation import Default, Input, Problem, cross_field_rule, documented, ref

CADDY_IMAGE = "caddy:2.11.7-alpine"
"""The pinned Caddy image the stack files front vLLM with when they name none."""
SSH_PORT = 22
"""The host's SSH port when the connection names none."""
BASE_DIR = "/opt/llm"
"""Host directory of the compose project when the caller names none."""
STARTUP_TIMEOUT_SECONDS = 3600
"""How long `up` waits for vLLM by default: the load plus ROCm kernel builds."""
METRICS_SITE_PORT = 9443
"""HTTPS port of the metrics site when the caller names none."""
StartupTimeout = Annotated[int, Field(ge=60, le=7 * 86_400)]
"""How long `up` waits for vLLM (seconds, a minute to a week)."""
DiskGib = Annotated[float, Field(ge=0, le=1_000_000)]
"""A disk size (GiB)."""
RamGib = Annotated[float, Field(ge=0, le=100_000)]
"""A RAM size (GiB)."""
TensorParallelSize = Annotated[int, Field(ge=1, le=8)]
"""`-tp`: GPUs the model is split over."""
MaxModelLen = Annotated[int, Field(ge=1024)]
"""`--max-model-len`: longest context in tokens."""
BatchedTokens = Annotated[int, Field(ge=16)]
"""`--max-num-batched-tokens`: scheduler token budget per step."""
KvCacheBytes = Annotated[int, Field(ge=2**30)]
"""`--kv-cache-memory-bytes`: GPU KV cache (bytes, at least 1 GiB)."""
OffloadGib = Annotated[float, Field(ge=0)]
"""`--kv-offloading-size`: CPU KV tier (GiB)."""
MaxNumSeqs = Annotated[int, Field(ge=1)]
"""`--max-num-seqs`: concurrent sequences."""
SpeculativeTokens = Annotated[int, Field(ge=1, le=16)]
"""Tokens a vLLM draft proposes per step."""


@documented
class CaddySite(TypedDict):
    """The HTTPS front door: site address, certificates and the client allowlist."""

    site: SiteAddress
    """A DNS name (automatic HTTPS) or the host's IP address (internal TLS only)."""
    tls: Literal["auto", "internal"]
    """`auto`: ACME certificates for the domain; `internal`: Caddy's own CA."""
    allowed_cidrs: list[Cidr]
    """Client networks allowed through; everything else gets 403. Never empty."""
    image: NotRequired[Annotated[ImageReference, Default(CADDY_IMAGE)]]
    """The Caddy 2.11 image, pinned by a full version tag or a digest."""
    acme_email: NotRequired[Email | None]
    """ACME account email; required with `tls: auto`."""
    allow_world: NotRequired[Annotated[bool, Default(False)]]
    """Accept an allowlist that admits every address (0.0.0.0/0, ::/0, or CIDRs adding up to
    it)."""


@cross_field_rule(CaddySite)
def _allowlist_admits_someone_not_everyone(site: Mapping[str, Any]) -> list[Problem]:
    """An allowlist that admits nobody is a mistake, and one that admits every address is one
    unless `allow_world` says so (the API site's rule, and the metrics site's)."""
    cidrs = site.get("allowed_cidrs")
    if cidrs == []:
        return [
            (
                ("allowed_cidrs",),
                "is empty, so nobody could connect: list the client networks (to admit every "
                f"address, 0.0.0.0/0 and ::/0 with {ref('allow_world')} set)",
            )
        ]
    if cidrs and covers_every_address(list(cidrs)) and not site["allow_world"]:
        return [
            (
                ("allowed_cidrs",),
                f"{list(cidrs)!r} together admit every address: list the client networks, or set "
                f"{ref('allow_world')} to serve the world on purpose",
            )
        ]
    return []


@documented
class HostRequirements(TypedDict):
    """What the preflight demands of the host before anything is downloaded or started."""

    min_free_disk_gib: DiskGib
    """Free disk in the model directory's filesystem, counting what the model already uses."""
    min_ram_gib: RamGib
    """Installed RAM (MemTotal): the CPU KV tier is pinned, so available RAM varies at run time."""


@documented
class HostMonitoring(TypedDict):
    """vLLM's metrics site, the optional GPU exporter, and what the alerts and dashboard watch."""

    port: NotRequired[Annotated[Port, Default(METRICS_SITE_PORT)]]
    """HTTPS port of the metrics site on the host (TLS like the API site)."""
    allowed_cidrs: list[Cidr]
    """Networks allowed to scrape; everyone else gets 403. Never empty."""
    allow_world: NotRequired[Annotated[bool, Default(False)]]
    """Accept a scrape allowlist that admits every address."""
    scrape_interval_seconds: NotRequired[Annotated[ScrapeSeconds, Default(SCRAPE_INTERVAL_SECONDS)]]
    """Scrape interval of the rendered Prometheus scrape config (seconds)."""
    gpu_exporter_image: NotRequired[ImageReference | None]
    """Pinned image of AMD's device metrics exporter (None: no exporter)."""
    alerts: NotRequired[Annotated[AlertThresholds, Default({})]]
    """When the alerts fire: stall minutes, KV share, how long a condition must hold."""
    reference: NotRequired[Annotated[ReferenceSpeeds, Default({})]]
    """Measured speeds, reference lines on the dashboard."""


# The scrape allowlist follows the API site's rule.
cross_field_rule(HostMonitoring)(_allowlist_admits_someone_not_everyone)


@documented
class SpeculativeConfig(TypedDict):
    """`--speculative-config` JSON (vLLM 0.33 keys)."""

    method: Identifier
    """Draft method, e.g. `dspark` (DeepSeek V4's own draft heads)."""
    num_speculative_tokens: SpeculativeTokens
    """Tokens drafted per step (the seed measured 7)."""


@documented
class VllmFlags(TypedDict):
    """`vllm serve` flags, one typed field per flag (vLLM 0.33 names in the docstrings)."""

    model: AbsolutePath
    """Positional MODEL: the model directory inside the container, e.g. `/models/<dir>`."""
    served_model_name: ModelName
    """`--served-model-name`: model id in `/v1/models`; LiteLLM routes by it."""
    host: IpAddress
    """`--host`: bind address inside the compose network (never published on the host)."""
    port: NotRequired[Annotated[Port, Default(8000)]]
    """`--port`: vLLM's port behind Caddy, on the compose network."""
    tensor_parallel_size: NotRequired[Annotated[TensorParallelSize, Default(1)]]
    """`-tp`: tensor parallel size, the GPUs the model is split over."""
    max_model_len: MaxModelLen
    """`--max-model-len`: longest context in tokens (262144 = 256k)."""
    max_num_batched_tokens: BatchedTokens
    """`--max-num-batched-tokens`: scheduler budget per step (seed 002: 2048)."""
    kv_cache_memory_bytes: KvCacheBytes
    """`--kv-cache-memory-bytes`: GPU KV cache in bytes (replaces --gpu-memory-utilization)."""
    kv_offloading_size_gib: OffloadGib
    """`--kv-offloading-size`: CPU KV tier in GiB, pinned host memory for prefix-cache entries."""
    kv_offloading_backend: NotRequired[Annotated[Literal["native", "lmcache"], Default("native")]]
    """`--kv-offloading-backend`: CPU KV tier implementation."""
    enable_prefix_caching: NotRequired[Annotated[bool, Default(True)]]
    """`--enable-prefix-caching` (or `--no-enable-prefix-caching`): reuses the KV of shared prompt
    prefixes."""
    speculative_config: NotRequired[SpeculativeConfig | None]
    """`--speculative-config`: speculative decoding (DSpark, draft tokens), as compact JSON."""
    reasoning_parser: NotRequired[Identifier | None]
    """`--reasoning-parser`: splits reasoning into `reasoning_content` (e.g. `deepseek_v4`)."""
    tool_call_parser: NotRequired[Identifier | None]
    """`--tool-call-parser` (and `--enable-auto-tool-choice`): parses the model's tool calls; lets
    the model call tools the client offers.
    """
    max_num_seqs: NotRequired[MaxNumSeqs | None]
    """`--max-num-seqs`: concurrent sequences (absent or None: vLLM's own)."""
    kv_cache_dtype: NotRequired[Identifier | None]
    """`--kv-cache-dtype`: KV cache dtype (fp8 becomes fp8_ds_mla for DeepSeek V4)."""


FLAG_OPTIONS: dict[str, str] = {
    "model": "--model",
    "served_model_name": "--served-model-name",
    "host": "--host",
    "port": "--port",
    "tensor_parallel_size": "-tp",
    "max_model_len": "--max-model-len",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "kv_offloading_size_gib": "--kv-offloading-size",
    "kv_offloading_backend": "--kv-offloading-backend",
    "max_num_seqs": "--max-num-seqs",
    "kv_cache_dtype": "--kv-cache-dtype",
    "speculative_config": "--speculative-config",
    "reasoning_parser": "--reasoning-parser",
    "tool_call_parser": "--tool-call-parser",
    "enable_prefix_caching": "--enable-prefix-caching",
}
"""The option each field of VllmFlags renders (`vllm_serve_args` writes exactly these; MODEL is
positional, the same as `--model`): every spelling of them is the program's."""
OWNED_OPTIONS: dict[str, tuple[str, ...]] = {
    **{option: ("flags", field) for field, option in FLAG_OPTIONS.items()},
    "--enable-auto-tool-choice": ("flags", "tool_call_parser"),
    # The parts vLLM builds a speculative config from.
    "--spec-method": ("flags", "speculative_config"),
    "--spec-model": ("flags", "speculative_config"),
    "--spec-tokens": ("flags", "speculative_config"),
    "--api-key": ("api_key",),
}
"""Every option the program sets (one spelling each) → the input it comes from."""
REFUSED_OPTIONS = option_categories.VLLM_SERVE_REFUSED
"""Options vLLM knows that this deployment must not pass (`components/option_categories.py`)."""


def extra_args_problems(words: list[str]) -> list[Problem]:
    """The problems of `vllm serve` extra words (locations relative to the words)."""
    table = vllm_serve_options()
    owned = owned_spellings(table, OWNED_OPTIONS)
    return parse_extra_args(words, table, owned, REFUSED_OPTIONS)[1]


@documented
class PatchOverlay(TypedDict):
    """A patched file bind-mounted read-only over a file of the vLLM image."""

    source: PatchSource
    """Local path of the patched file (relative to the Pulumi project or absolute)."""
    target: AbsolutePath
    """Absolute path of the file it replaces inside the container."""
    sha256: Sha256
    """sha256 of the file; the host verifies its copy and stops the deploy on a mismatch."""


@documented
class SshConnection(TypedDict):
    """How pulumi-command reaches the host."""

    host: Input[SiteAddress]
    """Host name or address of the SSH server."""
    user: Input[SshUser]
    """SSH user: may run docker and write base_dir and model_dir."""
    private_key: Input[str]
    """Private key (PEM/OpenSSH text); always passed on as a Pulumi secret."""
    port: NotRequired[Annotated[Input[Port], Default(SSH_PORT)]]
    """SSH port."""
    host_key: NotRequired[Input[SshHostKey] | None]
    """The host's public key (`ssh-keyscan -t ed25519 HOST` prints it): a different host key
    refuses the connection. Required unless insecure_ignore_host_key."""
    insecure_ignore_host_key: NotRequired[Annotated[bool, Default(False)]]
    """Connect without checking the host key (a warning says so)."""


@documented
class ModelLock(TypedDict):
    """The locked model the host fetches: what `llm-infra lock` resolved."""

    repo: RepoId
    """Hugging Face repo id, e.g. `deepseek-ai/DeepSeek-V4-Flash-0731`."""
    revision: Revision
    """The commit sha the lock resolved (a branch or tag only before the model is locked)."""
    files: list[ModelFile]
    """Every file of the model, with its size and sha256 when locked."""
    unresolved_patterns: NotRequired[list[FilePattern]]
    """File patterns not yet resolved to files: recorded in an unlocked preview's lock."""


@cross_field_rule(SshConnection)
def _host_key_or_explicit_opt_out(connection: Mapping[str, Any]) -> list[Problem]:
    insecure = connection["insecure_ignore_host_key"]
    if connection.get("host_key") is None and not insecure:
        return [
            (
                ("host_key",),
                "is required, so that nobody in between can pose as the host and receive the "
                "API key (paste what `ssh-keyscan -t ed25519 HOST` prints, or set "
                f"{ref('insecure_ignore_host_key')} to skip the check)",
            )
        ]
    if connection.get("host_key") is not None and insecure:
        return [
            (("insecure_ignore_host_key",), f"contradicts {ref('host_key')} (drop one of them)")
        ]
    if insecure:
        pulumi.log.warn(
            f"connection: the SSH host key is not checked (insecure_ignore_host_key): any host "
            f"answering at {connection.get('host')} receives the API key; set host_key instead"
        )
    return []


@documented
class VllmRocmServerArgs(TypedDict):
    """Inputs of VllmRocmServer."""

    connection: Input[SshConnection]
    """SSH connection to the GPU host (address, user and key may be other resources' outputs)."""
    model_dir: AbsolutePath
    """Host directory of the model files; survives `pulumi destroy`."""
    model_lock: ModelLock
    """The locked model, fetched into model_dir on the host (the fetcher's lock document)."""
    fetch_image: NotRequired[Annotated[ImageReference, Default(FETCH_IMAGE)]]
    """A pinned stock Python image that runs the fetcher, so the host needs no Python."""
    image: ImageReference
    """vLLM ROCm image pinned by digest (`vllm/vllm-openai-rocm@sha256:...`)."""
    flags: VllmFlags
    """`vllm serve` flags; `flags.model` is where model_dir is mounted in the container."""
    caddy: CaddySite
    """HTTPS site, TLS mode and client allowlist."""
    api_key: Input[EnvFileSecret]
    """API key clients send as a Bearer token; secret, only in a 0600 env file on the host."""
    requirements: HostRequirements
    """Minimum free disk and RAM the preflight demands."""
    base_dir: NotRequired[Annotated[AbsolutePath, Default(BASE_DIR)]]
    """Host directory of the compose project and its files."""
    patches: NotRequired[Annotated[list[PatchOverlay], Default([])]]
    """Patched files mounted read-only over the image's files, each pinned by sha256."""
    project_name: NotRequired[Annotated[DnsLabel, Default("llm")]]
    """Compose project name."""
    startup_timeout_seconds: NotRequired[
        Annotated[StartupTimeout, Default(STARTUP_TIMEOUT_SECONDS)]
    ]
    """How long `up` waits for vLLM to turn healthy (seconds: load plus kernel builds)."""
    fetch_parallel: NotRequired[Annotated[ParallelDownloads, Default(PARALLEL_DOWNLOADS)]]
    """Model files downloaded at once."""
    verify_expectations: NotRequired[str | None]
    """Recorded expectations (`llm-infra verify --record`): checked on the host after each up."""
    min_decode_tps: NotRequired[TokensPerSecond | None]
    """Decode-speed floor of that check (tok/s), and of the LlmDecodeBelowFloor alert."""
    metrics: NotRequired[HostMonitoring | None]
    """vLLM's /metrics on a second Caddy site, the GPU exporter, and the dashboard, alert rules
    and scrape config as files on the host; None: no metrics site."""
    extra_args: NotRequired[ExtraArgs | None]
    """Further `vllm serve` (vLLM 0.33) arguments, appended as argv words after the rendered
    flags in the compose command (e.g. `["--enforce-eager", "--max-log-len", "200"]`). Each
    option must be one vLLM's parser knows, written in full, with its value; an option the
    program renders (`--max-model-len`, `--port`, ... in any spelling) is refused, naming the
    input that sets it."""


@cross_field_rule(VllmRocmServerArgs)
def _extra_args_are_vllm_options(args: Mapping[str, Any]) -> list[Problem]:
    """Extra words: options vLLM 0.33 knows, none the program renders, with their values."""
    words = args.get("extra_args")
    if not isinstance(words, list):
        return []
    return located(extra_args_problems(words), "extra_args")
