"""The architectures llama.cpp b11434 loads, as its own source names and treats them.

`llama_archs.json` is read from the pinned build's source (`LLM_ARCH_NAMES` in
src/llama-arch.cpp, and how src/llama-model.cpp and src/models/*.cpp cache each one); a contract
test compares it with that source. Every name there can be locked and planned; what the plan
does not model exactly for one of them it states as an assumption (`infra.plan.architectures`).
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass
from pathlib import Path

_DATA = Path(__file__).with_name("llama_archs.json")


@dataclass(frozen=True)
class LlamaArchitectures:
    """`llama_archs.json`: the names, and the sets the plan treats apart."""

    build: str
    names: tuple[str, ...]
    recurrent: frozenset[str]
    """A recurrent state instead of (or beside, for `hybrid`) a KV cache."""
    hybrid: frozenset[str]
    no_cache: frozenset[str]
    """No KV cache at all (encoders, diffusion models)."""
    own_cache: frozenset[str]
    """A cache type of their own (sparse or compressed attention)."""
    sliding_window: frozenset[str]
    """Sliding-window layers, whose cache llama.cpp sizes to the window."""
    mtp_skip: frozenset[str]
    """NextN/MTP layers that llama.cpp leaves unloaded unless MTP speculation is on."""


@functools.cache
def llama_architectures() -> LlamaArchitectures:
    """The pinned build's architectures (read once)."""
    data = json.loads(_DATA.read_text())
    return LlamaArchitectures(
        build=data["build"],
        names=tuple(data["architectures"]),
        **{key: frozenset(data[key]) for key in (
            "recurrent", "hybrid", "no_cache", "own_cache", "sliding_window", "mtp_skip"
        )},
    )  # fmt: skip


def unknown_architecture(name: str) -> str | None:
    """Why `name` is no architecture llama.cpp loads (`is not ...`, with the nearest names it
    knows), else None."""
    known = llama_architectures()
    if name in known.names:
        return None
    near = difflib.get_close_matches(name, known.names, n=3, cutoff=0.6)
    hint = f"the nearest: {', '.join(near)}" if near else "components/llama_archs.json lists them"
    return f"is not an architecture llama.cpp {known.build} loads ({hint})"
