"""Config models of target `docker-host`: vLLM ROCm behind Caddy on one GPU host over SSH."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from components.extra_args import ExtraArgs
from components.grammars import SshUser
from components.monitoring.inputs import TokensPerSecond
from components.vllm.inputs import (
    BatchedTokens,
    CaddySite,
    DiskGib,
    HostRequirements,
    KvCacheBytes,
    MaxModelLen,
    MaxNumSeqs,
    OffloadGib,
    RamGib,
    SpeculativeConfig,
    SpeculativeTokens,
    SshConnection,
    StartupTimeout,
    TensorParallelSize,
    VllmFlags,
    VllmRocmServerArgs,
)
from infra.config.base import (
    AbsolutePath,
    Cidr,
    DeviceSettings,
    Email,
    Identifier,
    ImageReference,
    ModelName,
    Port,
    RepoModelSettings,
    RepoPath,
    SingleServer,
    SiteAddress,
    SshHostKey,
    Strict,
)
from infra.config.declared import declared
from infra.config.metrics import HostMetricsSettings


class HostSettings(Strict):
    """The GPU host and what it must offer."""

    address: SiteAddress
    """The host's DNS name or IP address."""
    user: SshUser
    """The SSH user on the host."""
    port: Port = declared(SshConnection, "port")
    host_key: SshHostKey | None = None
    """The host's public key (a line of `ssh-keyscan -t ed25519 HOST`): any other key refuses
    the connection, so nobody in between receives the API key."""
    insecure_ignore_host_key: bool = declared(SshConnection, "insecure_ignore_host_key")
    base_dir: AbsolutePath = declared(VllmRocmServerArgs, "base_dir")
    model_dir: AbsolutePath
    """Where the model lives on the host; `pulumi destroy` leaves it."""
    min_free_disk_gib: DiskGib = declared(HostRequirements, "min_free_disk_gib")
    min_ram_gib: RamGib = declared(HostRequirements, "min_ram_gib")


class SpeculativeSettings(Strict):
    """`--speculative-config`."""

    method: Identifier
    """Speculative decoding method (`method` of `--speculative-config`)."""
    num_speculative_tokens: SpeculativeTokens = declared(
        SpeculativeConfig, "num_speculative_tokens"
    )


class VllmSettings(Strict):
    """`vllm serve` flags and the image."""

    image: ImageReference
    """vLLM ROCm image, pinned by digest (`vllm/vllm-openai-rocm@sha256:...`)."""
    allow_floating_image: bool = False
    """Accept an image without a digest."""
    served_model_name: ModelName
    """`--served-model-name`: model id in `/v1/models`; LiteLLM routes by it."""
    port: Port = declared(VllmFlags, "port")
    tensor_parallel_size: TensorParallelSize = declared(VllmFlags, "tensor_parallel_size")
    max_model_len: MaxModelLen = declared(VllmFlags, "max_model_len")
    max_num_batched_tokens: BatchedTokens = declared(VllmFlags, "max_num_batched_tokens")
    max_num_seqs: MaxNumSeqs | None = declared(VllmFlags, "max_num_seqs")
    kv_cache_memory_bytes: KvCacheBytes = declared(VllmFlags, "kv_cache_memory_bytes")
    kv_offloading_size: OffloadGib = declared(VllmFlags, "kv_offloading_size_gib")
    kv_offloading_backend: Literal["native", "lmcache"] = declared(
        VllmFlags, "kv_offloading_backend"
    )
    kv_cache_dtype: Identifier | None = None
    """`--kv-cache-dtype`: KV cache dtype (fp8 becomes fp8_ds_mla for DeepSeek V4);
    unset: vLLM's own."""
    speculative: SpeculativeSettings | None = None
    """`--speculative-config`: speculative decoding; unset: none."""
    reasoning_parser: Identifier | None = None
    """`--reasoning-parser`: splits reasoning into `reasoning_content` (e.g.
    `deepseek_v4`); unset: none."""
    tool_call_parser: Identifier | None = None
    """`--tool-call-parser` (and `--enable-auto-tool-choice`): parses the model's tool calls;
    unset: no tool calls."""
    prefix_caching: bool = declared(VllmFlags, "enable_prefix_caching")
    startup_timeout_seconds: StartupTimeout = declared(
        VllmRocmServerArgs, "startup_timeout_seconds"
    )
    verify_after_up: bool = False
    """Run `llm-infra verify` on the host after each `pulumi up` (needs STACK.verify.json)."""
    min_decode_tps: TokensPerSecond | None = declared(VllmRocmServerArgs, "min_decode_tps")
    extra_args: ExtraArgs = []
    """Further `vllm serve` (vLLM 0.33) arguments, as argv words after the rendered flags in
    the compose command, e.g. `["--enforce-eager"]` (never through a shell; a `$` is written
    `$$` in the compose file, so it stays a plain character). Each option must be one vLLM's
    parser knows, written in full, with its value; one the other keys set (`--max-model-len`
    is `maxModelLen`, ...) is refused in any spelling. The memory plan refuses options that
    change memory it cannot count (`--cpu-offload-gb`, `--quantization`, `--enable-lora`,
    `-pp`, ...)."""


class CaddySettings(Strict):
    """The HTTPS front: site, certificates and who may connect."""

    site: SiteAddress
    """A DNS name (automatic HTTPS) or the host's IP address (internal TLS only)."""
    tls: Literal["auto", "internal"]
    """`auto`: ACME certificates for the domain; `internal`: Caddy's own CA."""
    acme_email: Email | None = None
    """ACME account email; required with `tls: auto`."""
    allowed_cidrs: list[Cidr]
    """Client networks allowed through; everything else gets 403."""
    allow_world: bool = declared(CaddySite, "allow_world")
    image: ImageReference = declared(CaddySite, "image")
    allow_floating_image: bool = False
    """Accept a Caddy image tag that pins no full version."""


class PatchSettings(Strict):
    """A patched file mounted read-only over the image's file, pinned by sha256."""

    source: RepoPath
    """Path of the patch file, relative to the project root (and inside it)."""
    target: AbsolutePath
    """Absolute path of the file it replaces inside the container."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """sha256 of the patch file; the host verifies its copy and stops the deploy on a mismatch."""


class HostMemorySettings(Strict):
    """What the memory plan checks against (seed 002's host)."""

    hbm_gib: Annotated[float, Field(gt=0)] = 192
    """GPU memory (HBM) of the host that vLLM may use (GiB): weights, KV cache, activations."""
    ram_gib: Annotated[float, Field(gt=0)] = 235
    """Host RAM (GiB): the pinned CPU KV tier and the runtime must fit in it."""
    disk_gb: Annotated[float, Field(gt=0)] = 500
    """Disk for the model and the images (GB)."""
    activation_reserve_gib: Annotated[float, Field(ge=0)] = 6
    """GPU memory kept free for activations beside the weights and the KV cache (GiB)."""
    runtime_gib: Annotated[float, Field(ge=0)] = 24
    """Host RAM the runtime itself takes beside the CPU KV tier (GiB)."""
    image_gb: Annotated[float, Field(ge=0)] = 40
    """Disk the container images take (GB)."""
    check: bool = True
    """Refuse a stack that does not fit (render, preview and up)."""
    device: DeviceSettings | None = None
    """The host's GPU in the plan's device table, for the speed estimate; unset: no estimate."""


class DockerHostModelSettings(RepoModelSettings):
    """The checkpoint: repo files (safetensors and configs)."""


class DockerHostStack(SingleServer, Strict):
    """vLLM ROCm behind Caddy on one GPU host reached over SSH."""

    kind: ClassVar[str] = "docker-host"
    """Its entry in the table of targets (`infra.targets.registry.TARGETS`)."""

    target: Literal["docker-host"]
    """The deployment target: `docker-host`, vLLM in Docker Compose on a host reached over SSH."""
    host: HostSettings
    """The GPU host, reached over SSH, and what it must offer."""
    model: DockerHostModelSettings
    """The checkpoint to serve: repo, revision and files (safetensors and configs)."""
    fetch_image: ImageReference = declared(VllmRocmServerArgs, "fetch_image")
    server: VllmSettings
    """`vllm serve` flags and vLLM's image."""
    caddy: CaddySettings
    """The HTTPS front: site, certificates and who may connect."""
    patches: list[PatchSettings] = declared(VllmRocmServerArgs, "patches")
    memory: HostMemorySettings = HostMemorySettings()
    """The host figures the memory plan checks the stack against."""
    metrics: HostMetricsSettings | None = None
    """vLLM's /metrics on a second Caddy site, a dashboard and alert rules (None: no metrics)."""


Mi300xStack = DockerHostStack
"""The former name (the first docker-host stack ran on an MI300X), kept for imports."""
