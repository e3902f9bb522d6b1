"""The host buffers llama.cpp b11434 repacks CPU-resident weights into, per CPU variant.

When a weight stays on the CPU, llama.cpp offers it to the CPU backend's "extra" buffer types
before the plain CPU buffer (`src/llama-model.cpp` `make_cpu_buft_list`, line 1080; the order is
`ggml/src/ggml-cpu/ggml-cpu.cpp` lines 46-67: AMX first, then CPU_REPACK). A tensor that one of
them takes leaves the mmap'd (or loaded) model buffer for an anonymous buffer of its own, which
counts against the container's memory limit like any allocation. Which tensors move depends on
their type and shape and on the CPU backend variant ggml loads: the official images ship one
library per x86 variant (`GGML_CPU_ALL_VARIANTS`) and ggml picks the best the CPU supports
(`ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp` lines 263-322), so a Zen 5 node runs `zen4`, a
Sapphire Rapids node `sapphirerapids`.

Rules, all from the pinned b11434 sources:

- CPU_REPACK (`ggml/src/ggml-cpu/repack.cpp` lines 4974-5140, x86 branches): Q4_0, Q4_K, IQ4_NL
  and MXFP4 with AVX2, Q2_K with AVX-512, each when the tensor's row count (`ne[1]`) is a
  multiple of 8; for 2-D weights of a matrix product and 3-D expert weights
  (`supports_op`, lines 5191-5222). Same size as the tensor (`get_alloc_size` is NULL).
- AMX (`ggml/src/ggml-cpu/amx/amx.cpp` lines 145-190; sizes `amx/mmq.cpp` lines 227-258 and
  2267-2287): only in a variant built with AMX_INT8 and AVX512_VNNI (`ggml-cpu.cpp` line 46),
  2-D matrix-product weights only (not the experts' MUL_MAT_ID) whose row count is a multiple of
  32 and whose row length is a multiple of 32 (Q4_0, Q4_1, Q8_0), 256 (Q4_K, Q5_K, Q6_K, IQ4_XS)
  or 16 (F16). Quantized rows are stored with extra bytes per block: 4 for Q8_0 (the s8s8
  compensation), 4 for Q4_K and Q5_K, 2 for IQ4_XS.

The input layer's `token_embd` is a row lookup (GET_ROWS), never repacked. `--no-repack` turns
all of it off (`use_extra_bufts`).

b11434's AMX path dies on quantized weights: `ggml_tile_config_init` (`amx/mmq.cpp` lines
204-224) keeps its tile configuration on the stack and GCC stores only the palette byte before
`ldtilecfg`, so the first `tilezero` of the warm-up run is an undefined instruction (SIGILL; seen
on a Xeon with AMX, tests/fixtures/cpu_variants/; upstream ggml-org/llama.cpp#26954). F16 in AMX
runs no tile instruction and serves. `Repack.amx_quantized_bytes` says when a plan would hit it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from components.gguf_header import GGML_TYPES
from components.model_store.inputs import CpuVariant
from infra.cpus import CPU_VARIANTS

# Row-count and row-length multiples, and extra bytes per block, of the rules above.
_REPACK_AVX2: Final = frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"})
_REPACK_AVX512: Final = frozenset({"Q2_K"})
_AMX_ROW_MULTIPLE: Final[Mapping[str, int]] = {
    "Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_XS": 256,
    "F16": 16,
}  # fmt: skip
_AMX_EXTRA_PER_BLOCK: Final[Mapping[str, int]] = {"Q8_0": 4, "Q4_K": 4, "Q5_K": 4, "IQ4_XS": 2}
# Elements per block and bytes per block of every ggml type, by name (the GGUF reader's table).
_BLOCKS: Final[Mapping[str, tuple[int, int]]] = {
    name: (block, size) for name, block, size in GGML_TYPES.values()
}
# The most a repack can grow a tensor: Q8_0 into AMX, (34 + 4) / 34.
MAX_GROWTH: Final = 38 / 34


@dataclass(frozen=True)
class MatmulWeight:
    """A weight of a matrix product as the GGUF header states it (what the rules read)."""

    type_name: str
    """ggml type name, as `components.gguf_header.GGML_TYPES` spells it (`Q4_K`, `F16`)."""
    dims: tuple[int, ...]
    """`ne`: row length, row count and, for expert weights, the expert count."""
    count: int = 1
    """How many tensors of this type and shape the layer holds."""

    @property
    def nbytes(self) -> int:
        """Bytes of these tensors in the file (and in a plain CPU buffer)."""
        block, size = _BLOCKS.get(self.type_name, (1, 0))
        elements = 1
        for dim in self.dims:
            elements *= dim
        return elements // block * size * self.count


@dataclass(frozen=True)
class Repack:
    """Where a set of CPU-resident weights goes under one CPU variant."""

    moved_bytes: int
    """File bytes of the tensors that leave the model buffer."""
    buffers: Mapping[str, int]
    """Bytes of each repack buffer (`CPU_REPACK`, `AMX`), as llama.cpp allocates them."""
    amx_quantized_bytes: int = 0
    """File bytes of quantized weights in AMX, on which b11434 dies (module docstring)."""

    @property
    def buffer_bytes(self) -> int:
        """All repack buffers together."""
        return sum(self.buffers.values())


def _amx_bytes(weight: MatmulWeight) -> int | None:
    """The AMX buffer's bytes for this weight, or None when AMX does not take it."""
    multiple = _AMX_ROW_MULTIPLE.get(weight.type_name)
    if multiple is None or len(weight.dims) != 2:
        return None
    row_length, rows = weight.dims
    if rows % 32 or row_length % multiple:
        return None
    if weight.type_name == "F16":
        return weight.nbytes
    block, size = _BLOCKS[weight.type_name]
    extra = _AMX_EXTRA_PER_BLOCK.get(weight.type_name, 0)
    return rows * (row_length // block) * (size + extra) * weight.count


def _repacked(weight: MatmulWeight, features: frozenset[str]) -> bool:
    if len(weight.dims) not in (2, 3) or weight.dims[1] % 8:
        return False
    if weight.type_name in _REPACK_AVX2:
        return "AVX2" in features
    return weight.type_name in _REPACK_AVX512 and "AVX512" in features


def repack(weights: Iterable[MatmulWeight], variant: CpuVariant) -> Repack:
    """The repack buffers of these CPU-resident matrix weights under a ggml CPU variant."""
    features = CPU_VARIANTS[variant]
    amx = "AMX_INT8" in features and "AVX512_VNNI" in features
    moved = quantized = 0
    buffers = {"AMX": 0, "CPU_REPACK": 0}
    for weight in weights:
        amx_bytes = _amx_bytes(weight) if amx else None
        if amx_bytes is not None:
            buffers["AMX"] += amx_bytes
            quantized += weight.nbytes if weight.type_name != "F16" else 0
        elif _repacked(weight, features):
            buffers["CPU_REPACK"] += weight.nbytes
        else:
            continue
        moved += weight.nbytes
    return Repack(moved, {name: size for name, size in buffers.items() if size}, quantized)


def worst_repack(weights: Iterable[MatmulWeight]) -> Repack:
    """The largest repack buffers over every variant: the budget when the node's CPU is unknown."""
    listed = list(weights)
    return max(
        (repack(listed, variant) for variant in CPU_VARIANTS),
        key=lambda r: (r.buffer_bytes - r.moved_bytes, r.buffer_bytes),
    )
