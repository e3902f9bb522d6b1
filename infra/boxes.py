"""The boxes `llm-infra init --box NAME` knows: the figures a kubernetes stack needs of its node."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Box:
    """A machine `init --box NAME` knows: the figures a kubernetes stack needs of its node."""

    gpu_memory_gib: float
    node_ram_gib: float
    carve_out_gib: float
    node_cpu: str
    threads: int
    what: str


BOXES: dict[str, Box] = {
    "strix-halo": Box(
        gpu_memory_gib=90,
        node_ram_gib=128,
        carve_out_gib=90,
        node_cpu="zen5",
        threads=16,
        what="the reference Strix Halo NUCBox: Ryzen AI Max 395 (16 Zen 5 cores), 128 GiB of "
        "unified memory with a 90 GiB firmware VRAM carve-out",
    ),
}
"""The boxes `init --box` stands for (the strix-halo stack's node); any other box states its
figures with --gpu-memory-gib, --node-ram-gib, --carve-out-gib, --node-cpu and --threads."""
