"""Random-weight models for the decisive rule of `verify`, and the thresholds they are checked by.

A random-weight model is flat: its top-1 beats its top-2 by a few hundredths of a nat where a
real checkpoint is decisive by several nats, so the default thresholds (set for real
checkpoints, docs/verify-and-bench.md) would call every position a near-tie. Expectations
recorded from these models carry `RANDOM_MODEL_TOLERANCE` instead, measured with
`bench/verify_rule.py` (equivalent runtimes against wrong ones, on the CPU build and on a GPU).
"""

from __future__ import annotations

from typing import Any

import gguf

from tests.support.tiny_gguf import TinyLlamaSpec

SMALL_F16 = TinyLlamaSpec(
    n_layer=4, n_embd=256, n_head=4, n_head_kv=4, n_ff=512,
    weight_type=gguf.GGMLQuantizationType.F16,
)  # fmt: skip
"""Four layers of 256, F16: large enough that CPU variants differ in the last bits (a near-tie
flips), small enough to load and answer in a second on two cores."""

RANDOM_MODEL_TOLERANCE: dict[str, float] = {"decisive_margin": 0.01, "logprob_abs": 0.01}
"""The rule's thresholds for a random-weight model (nats)."""
RANDOM_MODEL_GPU_TOLERANCE: dict[str, float] = {"decisive_margin": 0.05, "logprob_abs": 0.08}
"""The same for a random-weight model through a GPU backend (nats): on one H100 through
NVIDIA's Vulkan driver the same build, flags and model, started twice, differed by up to 0.026
nats in a chosen logprob and flipped tokens where the reference led by up to 0.027 nats (seeds
201-203 of the 43-layer llama); a Q4_0 copy of the weights differed by 0.207."""


def with_random_model_tolerance(doc: dict[str, Any], *, gpu: bool = False) -> dict[str, Any]:
    """An expectations document checked by the random-model thresholds (`gpu`: those of a GPU
    backend; its other tolerances, the decode-speed fraction, as they were)."""
    tolerance = RANDOM_MODEL_GPU_TOLERANCE if gpu else RANDOM_MODEL_TOLERANCE
    return {**doc, "tolerance": {**doc.get("tolerance", {}), **tolerance}}
