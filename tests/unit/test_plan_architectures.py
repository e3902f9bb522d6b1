"""The plan follows llama.cpp b11434 per architecture: sliding-window caches, unloaded NextN/MTP
layers, and one `assumed:` line for each architecture whose cache it does not model.

(tests/contract/test_plan_architectures.py checks the same figures against llama-server's log.)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from infra.plan.architectures import without_unloaded_layers
from infra.plan.deepseek4 import attention_shape, kv_cache_layers
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, plan_llamacpp
from infra.plan.report import GIB, MIB


def _metadata(arch: str, **extra: Any) -> dict[str, Any]:
    return {
        f"{arch}.block_count": 36,
        f"{arch}.embedding_length": 2880,
        f"{arch}.attention.head_count": 64,
        f"{arch}.attention.head_count_kv": 8,
        f"{arch}.attention.key_length": 64,
        f"{arch}.attention.value_length": 64,
        f"{arch}.feed_forward_length": 2880,
        f"{arch}.vocab_size": 201088,
        **{f"{arch}.{key}": value for key, value in extra.items()},
    }


def test_gpt_oss_sliding_window_layers_hold_the_window_not_the_context() -> None:
    # gpt-oss-120b: 36 layers, every other one through a 128-token window; 2 slots of 32k.
    shape = attention_shape("gpt-oss", _metadata("gpt-oss", **{"attention.sliding_window": 128}))
    assert shape.swa_layers == (True, False) * 18
    kv = kv_cache_layers(shape, 65536, 2, "f16", "f16")
    # 18 full layers x 2 x 32768 cells + 18 window layers x 2 x pad256(128 + 512) cells, of
    # 8 x 64 K and V f16 elements: about 2.3 GiB, not the 4.5 of a full context everywhere.
    row = 2 * 8 * 64 * 2
    assert kv.cache_bytes == 18 * 2 * 32768 * row + 18 * 2 * 768 * row
    assert round(kv.cache_bytes / GIB, 2) == 2.30
    full = kv_cache_layers(shape, 65536, 2, "f16", "f16", swa_full=True)
    assert full.cache_bytes == 36 * 2 * 32768 * row


def test_gemma3_reads_its_pattern_and_has_no_window_without_the_key() -> None:
    shape = attention_shape("gemma3", _metadata("gemma3", **{"attention.sliding_window": 1024}))
    assert shape.swa_layers[:12] == (True,) * 5 + (False,) + (True,) * 5 + (False,)
    assert not any(attention_shape("gemma3", _metadata("gemma3")).swa_layers)
    flags = [True, False] * 18
    per_layer = _metadata(
        "gemma3", **{"attention.sliding_window": 512, "attention.sliding_window_pattern": flags}
    )
    assert attention_shape("gemma3", per_layer).swa_layers == tuple(flags)


def _glm4moe_inputs(speculative: str | None) -> LlamaCppPlanInputs:
    metadata = _metadata("glm4moe", nextn_predict_layers=1)
    weights = ModelWeights(tuple([GIB] * 36), 256 * MIB, 512 * MIB, "lock summary")
    inputs = LlamaCppPlanInputs(
        weights=weights,
        attention=attention_shape("glm4moe", metadata),
        gpu_layers=37,
        ctx_size=32768,
        vram_bytes=96 * GIB,
        speculative=speculative,
    )
    return without_unloaded_layers(inputs, "glm4moe", metadata)


def test_glm4moe_nextn_layer_weights_are_not_counted_unless_mtp_loads_them() -> None:
    skipped = _glm4moe_inputs(None)
    assert skipped.weights.layer_bytes[-1] == 0
    assert skipped.weights.total_bytes == 35 * GIB + 768 * MIB
    assert skipped.model_file_bytes == 36 * GIB + 768 * MIB  # the files still hold it
    plan = plan_llamacpp(skipped)
    assert any("NextN/MTP layer weights (1.0 GiB) are not counted" in n for n in plan.notes)
    assert plan.devices["vram"].items["weights"] == 35 * GIB + 512 * MIB  # layers + output
    loaded = _glm4moe_inputs("draft-mtp")
    assert loaded.weights.total_bytes == 36 * GIB + 768 * MIB


@pytest.mark.parametrize(
    ("arch", "said"),
    [
        ("cohere2", "llama.cpp sizes its sliding-window layers' cache to the window"),
        ("mamba", "a recurrent model"),
        ("bert", "llama.cpp gives it no KV cache"),
        ("qwen3next", "a hybrid model"),
        ("minimax-m3", "llama.cpp gives it a cache of its own"),
    ],
)
def test_an_architecture_whose_cache_the_plan_does_not_model_gets_one_assumed_line(
    arch: str, said: str
) -> None:
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights(tuple([GIB] * 36), 256 * MIB, 512 * MIB, "lock summary"),
        attention=attention_shape(arch, _metadata(arch)),
        gpu_layers=37,
        ctx_size=32768,
        vram_bytes=96 * GIB,
    )
    lines = [a for a in plan_llamacpp(inputs).assumptions if a.startswith("architecture ")]
    assert len(lines) == 1
    assert lines[0].startswith(f"architecture {arch}: {said}")
    assert "the KV cache's 2.2 GiB of the 47.6 GiB planned" in lines[0]


@pytest.mark.parametrize("arch", ["gpt-oss", "qwen3moe", "glm4moe", "llama", "gemma3"])
def test_an_architecture_the_plan_models_gets_no_architecture_assumption(arch: str) -> None:
    metadata = _metadata(arch, **{"attention.sliding_window": 128})
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights(tuple([GIB] * 36), 256 * MIB, 512 * MIB, "lock summary"),
        attention=attention_shape(arch, metadata),
        gpu_layers=37,
        ctx_size=32768,
        vram_bytes=96 * GIB,
    )
    assert not [a for a in plan_llamacpp(inputs).assumptions if a.startswith("architecture ")]


def test_a_tied_output_layer_on_the_gpu_counts_its_copy_of_token_embd() -> None:
    # gemma's GGUFs have no output.weight: llama.cpp's output layer reuses token_embd and, on a
    # GPU, gets a copy of it there (TENSOR_DUPLICATED in another buffer type's context).
    metadata = _metadata("gemma3", **{"attention.sliding_window": 1024})
    other = {"token_embd.weight": 768 * MIB, "output_norm.weight": MIB}
    summary: dict[str, Any] = {
        "architecture": "gemma3",
        "layer_bytes": [GIB] * 36,
        "other_tensors": other,
    }
    weights = ModelWeights.from_summary(summary)
    assert weights.tied_output_bytes == 768 * MIB
    inputs = LlamaCppPlanInputs(
        weights=weights,
        attention=attention_shape("gemma3", metadata),
        gpu_layers=37,
        ctx_size=32768,
        vram_bytes=96 * GIB,
    )
    plan = plan_llamacpp(inputs)
    assert plan.devices["vram"].items["weights"] == 36 * GIB + MIB + 768 * MIB
    assert any("own copy of token_embd (768 MiB)" in n for n in plan.notes)
    # With the output layer on the CPU (-ngl 0), it shares token_embd's buffer: no copy.
    on_cpu = plan_llamacpp(replace(inputs, gpu_layers=0, repack=False))
    assert on_cpu.devices["ram"].items["weights"] == 36 * GIB + 768 * MIB + MIB
    untied = {**summary, "other_tensors": {**other, "output.weight": MIB}}
    assert ModelWeights.from_summary(untied).tied_output_bytes == 0
