"""The CPUs the plan knows: ggml's x86 CPU variants of llama.cpp b11434, their features, and
the CPUs by the names people know them (the repack rules of `infra.plan.repack` read them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, get_args

from components.model_store.inputs import CpuVariant

# ggml's x86 CPU variants and the features each is built with (`ggml/src/CMakeLists.txt` lines
# 493-517, b11434). The repack rules read only AVX2, AVX512 and AMX_INT8.
_HASWELL: Final = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")
CPU_VARIANTS: Final[Mapping[CpuVariant, frozenset[str]]] = {
    "x64": frozenset(),
    "sse42": frozenset({"SSE42"}),
    "sandybridge": frozenset({"SSE42", "AVX"}),
    "ivybridge": frozenset({"SSE42", "AVX", "F16C"}),
    "piledriver": frozenset({"SSE42", "AVX", "F16C", "FMA"}),
    "haswell": frozenset(_HASWELL),
    "skylakex": frozenset({*_HASWELL, "AVX512"}),
    "cannonlake": frozenset({*_HASWELL, "AVX512", "AVX512_VBMI"}),
    "cascadelake": frozenset({*_HASWELL, "AVX512", "AVX512_VNNI"}),
    "icelake": frozenset({*_HASWELL, "AVX512", "AVX512_VBMI", "AVX512_VNNI"}),
    "cooperlake": frozenset({*_HASWELL, "AVX512", "AVX512_VNNI", "AVX512_BF16"}),
    "zen4": frozenset({*_HASWELL, "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}),
    "alderlake": frozenset({*_HASWELL, "AVX_VNNI"}),
    "sapphirerapids": frozenset(
        {*_HASWELL, "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"}
    ),
}
if set(CPU_VARIANTS) != set(get_args(CpuVariant)):
    raise ImportError("infra.cpus.CPU_VARIANTS and components' CpuVariant name other variants")
# CPUs by the name people know them, to the variant ggml picks for them (the highest score).
CPU_NAMES: Final[Mapping[str, CpuVariant]] = {
    "zen3": "haswell",
    "zen4": "zen4",
    "zen5": "zen4",  # Strix Halo (Ryzen AI Max): AVX-512 with VBMI, VNNI and BF16; no AMX
    "sapphirerapids": "sapphirerapids",
    "emeraldrapids": "sapphirerapids",
    "graniterapids": "sapphirerapids",
}


def cpu_variant(name: str) -> CpuVariant:
    """The ggml variant for a CPU or variant name (`zen5` -> `zen4`); KeyError if unknown."""
    for variant in CPU_VARIANTS:
        if variant == name:
            return variant
    return CPU_NAMES[name]
