"""The llama.cpp planner's inputs: the model's weights, its RPC devices, the server settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from components.gguf_header import INPUT_TENSORS
from components.llama_archs import llama_architectures
from components.model_store.inputs import CpuVariant
from infra.plan.deepseek4 import (
    DEFAULT_BATCH,
    DEFAULT_UBATCH,
    AttentionShape,
)
from infra.plan.extra_args import CpuTensors
from infra.plan.repack import MatmulWeight
from infra.plan.report import (
    MIB,
    fmt_size,
)

DEFAULT_CACHE_RAM_MIB = 8192
NO_OUTPUT = llama_architectures().no_cache
"""Encoders and diffusion models: no output layer of token logits to tie."""

WeightSource = Literal["GGUF header", "lock summary", "file sizes + layer structure"]


@dataclass(frozen=True)
class ModelWeights:
    """Where a model's weight bytes are: per repeating layer, the input layer, the rest."""

    layer_bytes: tuple[int, ...]
    input_bytes: int
    """`token_embd` and other input tensors: always on the CPU."""
    output_bytes: int
    """Every other non-layer tensor (output, output_norm, ...): the output layer's device."""
    source: WeightSource
    matmul_weights: Mapping[str, tuple[MatmulWeight, ...]] | None = None
    """Matrix weights by layer index (`"0"`, ...) and `"output"`, for the CPU repack rules;
    None when the source has no per-tensor types (a schema 1 summary, file sizes)."""
    tied_output_bytes: int = 0
    """A model without `output.weight` (tied embeddings, as gemma's): llama.cpp's output layer
    reuses `token_embd` (`TENSOR_DUPLICATED`), and copies it into the output layer's buffer where
    that is another device's (a GPU); these are the bytes of that copy."""
    unloaded_bytes: int = 0
    """Weights in the files that llama.cpp does not load (NextN/MTP layers without MTP
    speculation: `infra.plan.architectures`); not in `total_bytes`."""

    @property
    def total_bytes(self) -> int:
        """All weight bytes."""
        return sum(self.layer_bytes) + self.input_bytes + self.output_bytes

    @classmethod
    def from_summary(
        cls, summary: Mapping[str, Any], source: WeightSource = "lock summary"
    ) -> ModelWeights:
        """From a `components.gguf_header.summarize` summary."""
        other: Mapping[str, int] = summary["other_tensors"]
        inputs = sum(b for n, b in other.items() if n.startswith(INPUT_TENSORS))
        listed: Mapping[str, Mapping[str, int]] | None = summary.get("matmul_weights")
        matmul = None
        if listed is not None:
            matmul = {
                where: tuple(_matmul_weight(key, count) for key, count in found.items())
                for where, found in listed.items()
            }
        tied = 0
        if "output.weight" not in other and summary["architecture"] not in NO_OUTPUT:
            tied = other.get("token_embd.weight", 0)
        return cls(
            layer_bytes=tuple(int(b) for b in summary["layer_bytes"]),
            input_bytes=inputs,
            output_bytes=sum(other.values()) - inputs,
            source=source,
            matmul_weights=matmul,
            tied_output_bytes=tied,
        )

    @classmethod
    def from_file_sizes(cls, total_bytes: int, n_layer: int) -> ModelWeights:
        """Without a header: the files' bytes spread evenly over the layers (conservative for
        the GPU, since the CPU-only input layer is counted as layer weight)."""
        per_layer, rest = divmod(total_bytes, n_layer)
        layers = tuple(per_layer + (1 if i < rest else 0) for i in range(n_layer))
        return cls(layers, 0, 0, "file sizes + layer structure")


def _matmul_weight(key: str, count: int) -> MatmulWeight:
    """`"Q4_K 4096x1024"`, 2 (a summary's `matmul_weights` entry) as a MatmulWeight."""
    type_name, _, shape = key.partition(" ")
    return MatmulWeight(type_name, tuple(int(d) for d in shape.split("x")), int(count))


@dataclass(frozen=True)
class RpcDevice:
    """Another node's GPU, reached through its rpc-server (`--rpc host:port`)."""

    name: str
    """The worker's name: its plan device is `vram:<name>`."""
    vram_bytes: int
    """GPU memory rpc-server may use on that node."""
    compute_override_bytes: int | None = None
    """Its measured compute buffer, replacing the estimate."""


@dataclass(frozen=True)
class LlamaCppPlanInputs:
    """Everything a llama-server memory plan depends on."""

    weights: ModelWeights
    attention: AttentionShape
    gpu_layers: int
    """`-ngl` (`server.gpuLayers`)."""
    ctx_size: int
    """`-c` (`server.contextSize`)."""
    parallel: int = 1
    """`-np` (`server.parallel`)."""
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    ubatch: int = DEFAULT_UBATCH
    batch: int = DEFAULT_BATCH
    kv_unified: bool = False
    """llama-server turns it on only when `-np` is auto; the renderer always passes `-np`."""
    flash_attn: bool = True
    """`-fa auto` resolves to on for Vulkan and CPU (and quantized V caches require it)."""
    swa_full: bool = False
    vram_bytes: int | None = None
    """GPU memory available to llama-server; None: no GPU (everything on the CPU)."""
    memory_limit_bytes: int | None = None
    """Container memory limit (`server.resources.limits.memory`); None: not checked."""
    node_ram_bytes: int | None = None
    """RAM the node can give the container (`memory.node`: installed, less the GPU's carve-out
    and what the node keeps); None: not checked."""
    carve_out_bytes: int | None = None
    """Unified memory: the GPU's carve-out, beyond which its buffers (GTT) take node RAM too;
    None: a discrete GPU, or no node figures."""
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    """`--cache-ram`: prompt cache in host RAM, counted against the memory limit."""
    runtime_bytes: int = 512 * MIB
    """Process, driver and allocator overhead in host RAM."""
    compute_override_bytes: Mapping[str, int] = field(default_factory=dict)
    """Measured compute buffers by device (`vram`, `ram`), replacing the estimate."""
    disk_bytes: int | None = None
    """Model volume size (`store.size`); None: not checked."""
    model_file_bytes: int | None = None
    """Bytes of the model files on disk (lock sizes); default: the weight bytes."""
    disk_headroom_fraction: float = 0.02
    """Free space kept on the volume (temporary download names, filesystem overhead)."""
    upgrade_keeps_old_model: bool = False
    """`store.upgrade: keep`: during an upgrade the volume holds the old model and the new one."""
    n_rs_seq: int = 0
    """deepseek4 compressor-state rollback planes (speculative decoding only)."""
    speculative: str | None = None
    """`--spec-type` (`server.speculative.method`); None: no speculative decoding."""
    draft: DraftPlan | None = None
    """The speculative draft model (`server.speculative.draft`), wholly on the GPU."""
    cpu_variant: CpuVariant | None = None
    """The ggml CPU variant of the node (`infra.cpus.CPU_VARIANTS`), which decides the
    repack buffers of CPU-resident weights; None: unknown, the largest is budgeted."""
    repack: bool = True
    """False with `--no-repack`: CPU-resident weights stay in the model buffer."""
    rpc_devices: tuple[RpcDevice, ...] = ()
    """Other nodes' GPUs through rpc-server, in `--rpc` order (llama.cpp puts them first)."""
    tensor_split: tuple[float, ...] | None = None
    """`--tensor-split` over the RPC devices then the local GPU; None: proportional to each
    device's VRAM (see `rpc_tensor_split`)."""
    min_slot_context: int | None = None
    """Tokens each slot must hold (`server.minSlotContext`): advice never goes below it."""
    context_limit: int | None = None
    """Tokens a slot can serve: the model's trained context, or the YaRN-extended one
    (llama-server caps a slot there); advice never goes above it. None: unknown."""
    extra_args: tuple[str, ...] = ()
    """`server.extraArgs` as written: a fix that adds an option keeps them."""
    tensors: Mapping[str, str] | None = None
    """Every tensor's `TYPE ne0x..` from the header (a schema 3 summary), for advice that keeps
    tensors in host RAM (`--n-cpu-moe`); None: not known."""
    cpu_tensors: CpuTensors = field(default_factory=CpuTensors)
    """Tensors that tensor overrides (`-ot ...=CPU`, `--n-cpu-moe`, ...) keep in host RAM,
    whatever their layer's device (`infra.plan.extra_args`)."""
    runtime: str = "vulkan"
    """The runtime's name (`server.runtime`), as the plan's lines name it."""
    gpu_device: str = "Vulkan0"
    """The local GPU as llama-server's load log names it (`Vulkan0`, `ROCm0`): its buffers
    (`load_tensors: ROCm0 model buffer size`) are the plan's `vram`."""
    compute_estimate: Literal["vulkan", "cpu", "upper-bound"] = "vulkan"
    """The runtime's compute-buffer estimate (`components.llamacpp.runtimes`): `vulkan` or `cpu`
    where measured, else the upper bound, which the plan states as an assumption."""


# -- compute buffers ------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftPlan:
    """A speculative draft model as llama-server b11434 holds it: every layer on the GPU
    (`--spec-draft-ngl all`), a context of the target's size (common/speculative.cpp: "the
    draft context holds as many tokens per sequence as the target context"), f16 KV cache (the
    `--spec-draft-type-k/-v` default)."""

    weight_bytes: int
    """Its weights: the lock's sizes (or `server.speculative.draft.sizeGib` before a lock)."""
    kv_bytes: int | None
    """Its KV cache at the target's context; None: unknown until its header is locked."""
    compute_bytes: int
    """Its compute buffer (estimated like the model's, from its structure)."""
    file_bytes: int
    """Its files on the model volume."""

    @property
    def device_bytes(self) -> int:
        """What it takes on the GPU."""
        return self.weight_bytes + (self.kv_bytes or 0) + self.compute_bytes


def draft_text(draft: DraftPlan | None) -> str:
    """The plan table's name of the speculative draft's item."""
    if draft is None or draft.kv_bytes is None:
        return "speculative draft (weights)"
    return (
        f"speculative draft (weights {fmt_size(draft.weight_bytes)}, f16 KV "
        f"{fmt_size(draft.kv_bytes)}, compute {fmt_size(draft.compute_bytes)})"
    )


def speculation_assumptions(inputs: LlamaCppPlanInputs, total: str) -> list[str]:
    """What the plan leaves out of speculative decoding, one line (`total`: what it planned)."""
    if inputs.speculative == "draft-mtp":
        return [
            f"speculative decoding (draft-mtp): the MTP layer's weights are counted with the "
            f"model's, and {inputs.n_rs_seq} rollback planes per slot with the KV cache; the MTP "
            f"draft context's own KV cache and compute buffer are not measured yet (not in the "
            f"{total} planned): keep headroom"
        ]
    if inputs.draft is not None and inputs.draft.kv_bytes is None:
        return [
            f"speculative decoding ({inputs.speculative}): the draft's weights "
            f"{fmt_size(inputs.draft.weight_bytes)} are counted on the GPU; its KV cache and "
            "compute buffer are known once its GGUF header is locked (run: llm-infra lock STACK)"
        ]
    if inputs.speculative is not None and inputs.speculative.startswith("ngram-"):
        return [
            f"speculative decoding ({inputs.speculative}): the n-gram cache lives in host RAM "
            f"and is not counted (not in the {total} planned)"
        ]
    return []
