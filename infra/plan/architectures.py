"""What llama.cpp b11434 does differently per architecture, for the plan.

Two things the plan follows exactly: NextN/MTP layers, which the loaders of the architectures in
`components.llama_archs` `mtp_skip` leave unloaded (`TENSOR_SKIP`) unless MTP speculation is on
(`--spec-type draft-mtp` sets `load_mtp`), and the sliding window of `SLIDING_WINDOW_MODELS`
(`infra.plan.deepseek4`). What it does not model (a recurrent state, a cache type of its own, a
sliding window of another architecture, no cache at all) it states as one assumption each, with
the share of the total that rests on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from components.llama_archs import llama_architectures
from infra.plan.deepseek4 import SLIDING_WINDOW_MODELS
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs
from infra.plan.report import fmt_size

MTP_METHOD = "draft-mtp"


def mtp_layers(architecture: str, metadata: Mapping[str, Any], n_blocks: int) -> range:
    """The NextN/MTP blocks llama.cpp b11434 skips unless MTP is loaded (empty where none)."""
    if architecture not in llama_architectures().mtp_skip:
        return range(0)
    nextn = metadata.get(f"{architecture}.nextn_predict_layers", 0)
    if not isinstance(nextn, int) or isinstance(nextn, bool) or not 0 < nextn < n_blocks:
        return range(0)
    return range(n_blocks - nextn, n_blocks)


def without_unloaded_layers(
    inputs: LlamaCppPlanInputs, architecture: str, metadata: Mapping[str, Any]
) -> LlamaCppPlanInputs:
    """The plan's inputs without the weights of the MTP blocks llama.cpp does not load (kept
    with `server.speculative.method: draft-mtp`, which loads them); the files keep them."""
    weights = inputs.weights
    skipped = mtp_layers(architecture, metadata, len(weights.layer_bytes))
    if not skipped or inputs.speculative == MTP_METHOD:
        return inputs
    layer_bytes = tuple(0 if il in skipped else b for il, b in enumerate(weights.layer_bytes))
    matmul = weights.matmul_weights
    if matmul is not None:
        matmul = {
            where: found
            for where, found in matmul.items()
            if not (where.isdigit() and int(where) in skipped)
        }
    return replace(
        inputs,
        weights=replace(
            weights,
            layer_bytes=layer_bytes,
            matmul_weights=matmul,
            unloaded_bytes=weights.total_bytes - sum(layer_bytes) - weights.input_bytes
            - weights.output_bytes,
        ),
        model_file_bytes=inputs.model_file_bytes or weights.total_bytes,
    )  # fmt: skip


def architecture_notes(inputs: LlamaCppPlanInputs) -> list[str]:
    """What the plan follows of llama.cpp's handling of this architecture, one line each."""
    shape, weights = inputs.attention, inputs.weights
    notes = []
    if weights.unloaded_bytes:
        notes.append(
            f"{shape.architecture}: the NextN/MTP layer weights "
            f"({fmt_size(weights.unloaded_bytes)}) are not counted: llama.cpp skips them unless "
            f"server.speculative.method is {MTP_METHOD}"
        )
    n_layer = len(weights.layer_bytes)
    if weights.tied_output_bytes and inputs.vram_bytes is not None and inputs.gpu_layers > n_layer:
        notes.append(
            f"{shape.architecture}: no output.weight (tied embeddings): the output layer on the "
            f"GPU gets its own copy of token_embd ({fmt_size(weights.tied_output_bytes)}), "
            "counted with the GPU's weights"
        )
    if shape.kind == "standard" and any(shape.swa_layers) and not inputs.swa_full:
        n_swa = sum(shape.swa_layers)
        notes.append(
            f"{shape.architecture}: {n_swa} of {shape.n_layer} layers attend through a "
            f"{shape.sliding_window}-token sliding window; llama.cpp sizes their KV cache to the "
            "window (plus a ubatch) per slot, not to the context (--swa-full would)"
        )
    return notes


def architecture_assumptions(inputs: LlamaCppPlanInputs, total: int, kv: int) -> list[str]:
    """How the plan's KV cache differs from what llama.cpp allocates for this architecture,
    one line, with the KV bytes of the `total` planned that rest on it; none where exact."""
    shape = inputs.attention
    arch = shape.architecture
    known = llama_architectures()
    share = f"the KV cache's {fmt_size(kv)} of the {fmt_size(total)} planned"
    if arch in known.no_cache:
        what = "llama.cpp gives it no KV cache (an encoder or a diffusion model)"
        effect = f"{share} are not allocated (an upper bound)"
    elif arch in known.recurrent:
        what = "a recurrent model: llama.cpp keeps a fixed state per slot, not a KV cache"
        effect = f"{share} are counted as if every layer attended (not measured)"
    elif shape.kind == "deepseek4":
        return []
    elif arch in known.hybrid:
        what = (
            "a hybrid model: llama.cpp caches only its attention layers, beside a recurrent "
            "state per slot"
        )
        effect = f"{share} are counted as if every layer attended (not measured)"
    elif arch in known.own_cache:
        what = "llama.cpp gives it a cache of its own (sparse or compressed attention)"
        effect = f"{share} are a standard KV cache, not that one (not measured)"
    elif arch in known.sliding_window and arch not in SLIDING_WINDOW_MODELS:
        what = "llama.cpp sizes its sliding-window layers' cache to the window"
        effect = f"{share} give every layer the full context (an upper bound)"
    else:
        return []
    return [f"architecture {arch}: {what}; {effect}"]
