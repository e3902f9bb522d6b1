"""The memory planner: seed 000's budget, the deepseek4 KV layout, refusals, suggestions, MI300X."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest

from components.gguf_header import row_bytes
from infra.config import ConfigError, parse_stack
from infra.plan.deepseek4 import (
    AttentionShape,
    attention_shape,
    kv_cache_layers,
    kv_layout,
    pad,
)
from infra.plan.llamacpp import (
    LlamaCppPlanInputs,
    ModelWeights,
    placement,
    plan_llamacpp,
    suggest,
)
from infra.plan.report import GB, GIB, MIB, PlanError
from infra.plan.vllm import VllmPlanInputs, plan_vllm
from infra.plan.vllm_kv import DEEPSEEK_V4_FLASH, kv_layout_of
from infra.targets.registry import stack_plan
from tests.conftest import stack_values, strix, unlocked_source
from tests.support.plan_samples import VULKAN_MEASURED

# DeepSeek-V4-Flash as llama.cpp reads it: 43 layers, K-only head 512, one KV head, a
# 128-token window, 2 uncompressed + 21 ratio-4 + 20 ratio-128 layers, indexer head 128.
V4_RATIOS = [0, 0] + [4, 128] * 20 + [4]
V4_METADATA = {
    "deepseek4.block_count": 43,
    "deepseek4.embedding_length": 4096,
    "deepseek4.attention.head_count": 64,
    "deepseek4.attention.head_count_kv": 1,
    "deepseek4.attention.key_length": 512,
    "deepseek4.attention.value_length": 512,
    "deepseek4.attention.sliding_window": 128,
    "deepseek4.attention.indexer.key_length": 128,
    "deepseek4.attention.compress_ratios": V4_RATIOS,
    "deepseek4.expert_feed_forward_length": 2048,
    "deepseek4.expert_used_count": 6,
}
V4_SHAPE = attention_shape("deepseek4", V4_METADATA, vocab_size=129280)
SEED_MODEL_BYTES = 87 * GIB
# Seed 000: -ngl 40, -c 65536, -np 1, q8_0 K and V, 90 GiB VRAM, 20Gi limit, ~2 GiB compute.
SEED = LlamaCppPlanInputs(
    weights=ModelWeights.from_file_sizes(SEED_MODEL_BYTES, 43),
    attention=V4_SHAPE,
    gpu_layers=40,
    ctx_size=65536,
    parallel=1,
    cache_type_k="q8_0",
    cache_type_v="q8_0",
    vram_bytes=90 * GIB,
    memory_limit_bytes=20 * GIB,
    compute_override_bytes={"vram": 2 * GIB},
    disk_bytes=120 * GIB,
    cpu_variant="zen4",  # Strix Halo's Zen 5 runs ggml's zen4 variant
)


def reference_formula_kv(ctx: int, ubatch: int, cache: str) -> int:
    """REFERENCE.md's deepseek4 formula for one stream, written out independently."""
    c = pad(ctx)
    raw = 43 * pad(min(c, 128 + ubatch)) * row_bytes(cache, 512)
    csa = 21 * pad(math.ceil(c / 4)) * row_bytes(cache, 512)
    hca = 20 * pad(math.ceil(c / 128)) * row_bytes(cache, 512)
    lid = 21 * pad(math.ceil(c / 4)) * row_bytes(cache, 128)
    state = 4 * 2 * (21 * 1024 * 8 + 20 * 512 * 128 + 21 * 256 * 8)
    return raw + csa + hca + lid + state


def test_deepseek4_kv_at_64k_q8_0_one_slot_is_about_257_mib() -> None:
    layers = kv_cache_layers(V4_SHAPE, 65536, 1, "q8_0", "q8_0")
    kv = layers.cache_bytes + layers.state_bytes
    assert kv == reference_formula_kv(65536, 512, "q8_0")
    assert kv / MIB == pytest.approx(257.2, abs=0.1)


def test_deepseek4_compressor_state_is_about_11_6_mib_per_stream() -> None:
    layers = kv_cache_layers(V4_SHAPE, 65536, 1, "q8_0", "q8_0")
    assert layers.state_bytes / MIB == pytest.approx(11.64, abs=0.01)
    two = kv_cache_layers(V4_SHAPE, 131072, 2, "q8_0", "q8_0")
    assert two.state_bytes == 2 * layers.state_bytes


def test_deepseek4_kv_grows_with_slots_even_when_unified() -> None:
    one = kv_cache_layers(V4_SHAPE, 65536, 1, "f16", "f16")
    unified = kv_cache_layers(V4_SHAPE, 65536, 2, "f16", "f16", kv_unified=True)
    # Each of the 2 streams is sized for the whole 64k context.
    assert unified.cache_bytes == 2 * one.cache_bytes


def test_deepseek4_f16_doubles_q8_0_roughly() -> None:
    q8 = kv_cache_layers(V4_SHAPE, 65536, 1, "q8_0", "q8_0").cache_bytes
    f16 = kv_cache_layers(V4_SHAPE, 65536, 1, "f16", "f16").cache_bytes
    assert f16 == pytest.approx(q8 * 32 / 17, rel=1e-9)


def test_seed_budget_is_reproduced_with_b11434_layer_placement() -> None:
    plan = plan_llamacpp(SEED)
    vram, ram = plan.devices["vram"], plan.devices["ram"]
    per_layer = SEED_MODEL_BYTES / 43
    # -ngl 40: the output layer and 39 repeating layers on the GPU (layers 0-3 on the CPU);
    # the seed counted 40 layers (~81 GiB) and 3 on the CPU (~6 GiB).
    assert placement(43, 40).gpu_layers == tuple(range(4, 43))
    assert vram.items["weights"] == pytest.approx(39 * per_layer, abs=64)
    assert 78 * GIB < vram.items["weights"] < 81.5 * GIB
    assert 6 * GIB < ram.items["weights"] < 8.5 * GIB
    kv = kv_cache_layers(V4_SHAPE, 65536, 1, "q8_0", "q8_0")
    assert vram.items["kv_cache"] + ram.items["kv_cache"] == kv.cache_bytes + kv.state_bytes
    assert vram.items["compute"] == 2 * GIB
    assert plan.fits
    free = vram.capacity_bytes - vram.used_bytes if vram.capacity_bytes else 0
    assert 5 * GIB <= free <= 9 * GIB
    assert ram.items["prompt_cache"] == 8192 * MIB


def test_each_device_names_the_layers_it_holds() -> None:
    plan = plan_llamacpp(SEED)
    # -ngl 40 of 43: the output layer and the last 39 repeating layers on the GPU.
    assert plan.devices["vram"].layers == "layers 4-42 + output"
    assert plan.devices["ram"].layers == "layers 0-3"
    assert plan.devices["disk"].layers is None
    on_cpu = plan_llamacpp(replace(SEED, gpu_layers=0, vram_bytes=None))
    assert on_cpu.devices["ram"].layers == "layers 0-42 + output"


def test_seed_table_names_components_verdict_source_and_kv_difference() -> None:
    table = plan_llamacpp(SEED).table()
    print(table)
    assert re.search(r"weights \(39 of 43 layers \+ output\) +78\.9 GiB +VRAM", table)
    assert re.search(r"KV cache \(q8_0/q8_0, 65536 cells x 1 slot\) +244 MiB +VRAM", table)
    assert re.search(r"prompt cache \(--cache-ram 8192\) +8\.0 GiB +RAM \(container\)", table)
    assert "weights from: file sizes + layer structure" in table
    assert re.search(r"deepseek4 KV cache 257 MiB .*seed 000 assumed \(~1\.6 GiB", table)
    assert "verdict: fits" in table


def test_plan_json_follows_the_contract() -> None:
    document = json.loads(json.dumps(plan_llamacpp(SEED).to_json()))
    assert document["fits"] is True
    assert set(document["devices"]) == {"vram", "ram", "disk"}
    for device in document["devices"].values():
        assert set(device) == {"capacity_gib", "used_gib", "free_gib", "items"}
        assert device["used_gib"] == pytest.approx(sum(device["items"].values()), abs=0.01)
    assert document["devices"]["vram"]["capacity_gib"] == 90.0
    assert isinstance(document["advice"], list)


def test_lock_summary_keeps_token_embd_on_cpu_and_output_on_gpu() -> None:
    summary = {
        "architecture": "deepseek4",
        "metadata": V4_METADATA,
        "vocab_size": 129280,
        "layer_bytes": [2 * GIB] * 43,
        "other_tensors": {"token_embd.weight": 300 * MIB, "output.weight": 400 * MIB},
        "total_bytes": 86 * GIB + 700 * MIB,
        "tensor_count": 1000,
    }
    weights = ModelWeights.from_summary(summary)
    assert (weights.input_bytes, weights.output_bytes) == (300 * MIB, 400 * MIB)
    plan = plan_llamacpp(replace(SEED, weights=weights, gpu_layers=44))
    assert plan.devices["vram"].items["weights"] == 86 * GIB + 400 * MIB
    assert plan.devices["ram"].items["weights"] == 300 * MIB
    assert "weights from: lock summary" in plan.table()


def test_vram_refusal_names_numbers_and_the_highest_gpu_layers_that_fit() -> None:
    inputs = replace(SEED, gpu_layers=44, compute_override_bytes={"vram": 4 * GIB})
    plan = plan_llamacpp(inputs)
    assert not plan.fits
    (message,) = plan.problems
    assert message.startswith("plan: does not fit in VRAM: 91.3 GiB needed of 90 GiB (weights")
    assert "weights 87.0 GiB for 43 of 43 layers + output, KV cache 257 MiB, compute 4.0 GiB" in (
        message
    )
    match = re.search(r"set server\.gpuLayers to at most (\d+)", message)
    assert match
    best = int(match[1])
    assert plan_llamacpp(replace(inputs, gpu_layers=best)).devices["vram"].fits
    assert not plan_llamacpp(replace(inputs, gpu_layers=best + 1)).devices["vram"].fits
    with pytest.raises(PlanError, match="does not fit in VRAM"):
        plan.check()
    assert plan.to_json()["fits"] is False
    assert message in plan.to_json()["advice"]


def test_vram_refusal_offers_the_context_that_fits_when_kv_is_the_problem() -> None:
    inputs = replace(SEED, gpu_layers=44, ctx_size=1_048_576, compute_override_bytes={"vram": 0})
    (message,) = plan_llamacpp(inputs).problems
    match = re.search(r"lower server\.contextSize to at most (\d+)", message)
    assert match
    ctx = int(match[1])
    assert plan_llamacpp(replace(inputs, ctx_size=ctx)).devices["vram"].fits
    assert not plan_llamacpp(replace(inputs, ctx_size=ctx + 1024)).devices["vram"].fits


def test_context_advice_never_goes_below_the_slots_minimum_context() -> None:
    # 4 slots of 64k on an 88 GiB GPU: at most 258048 tokens of context fit, less than 4 x 64k.
    floor = 65_536
    inputs = replace(
        SEED, gpu_layers=44, ctx_size=4 * floor, parallel=4, vram_bytes=88 * GIB,
        compute_override_bytes={"vram": 0}, min_slot_context=floor,
    )  # fmt: skip
    (message,) = plan_llamacpp(inputs).problems
    assert "lower server.contextSize to at most" not in message
    assert "lower server.parallel to 3 and server.contextSize to 196608" in message
    assert "(4 slots of server.minSlotContext 65536 need 262144; at most 258048 fits)" in message
    # The advice holds: it fits, and each slot keeps server.minSlotContext.
    advised = replace(inputs, parallel=3, ctx_size=196_608)
    assert plan_llamacpp(advised).fits
    # Without the minimum, the plain advice is the largest context that fits.
    (plain,) = plan_llamacpp(replace(inputs, min_slot_context=None)).problems
    assert "lower server.contextSize to at most 258048" in plain


def suggested(pattern: str, message: str) -> int:
    """The number a refusal's `message` suggests, the one group of `pattern`."""
    match = re.search(pattern, message)
    assert match, message
    return int(match[1])


def test_memory_limit_refusal_counts_the_prompt_cache_and_names_the_limit_to_raise() -> None:
    inputs = replace(SEED, memory_limit_bytes=12 * GIB)
    (message,) = plan_llamacpp(inputs).problems
    assert message.startswith("plan: does not fit in the container memory limit: 17.4 GiB needed")
    assert "prompt cache 8.0 GiB (--cache-ram 8192)" in message
    limit = suggested(r"raise server\.resources\.limits\.memory to at least (\d+)Gi", message)
    assert plan_llamacpp(replace(inputs, memory_limit_bytes=limit * GIB)).fits
    cache = suggested(r"set server\.cacheRam to at most (\d+) MiB", message)
    assert plan_llamacpp(replace(inputs, cache_ram_mib=cache)).fits


def test_disk_refusal_names_the_volume_size_to_set() -> None:
    inputs = replace(SEED, disk_bytes=80 * GIB)
    (message,) = plan_llamacpp(inputs).problems
    assert message.startswith("plan: does not fit on the model volume: ")
    size = suggested(r"raise store\.size to at least (\d+)Gi", message)
    assert plan_llamacpp(replace(inputs, disk_bytes=size * GIB)).fits


def test_suggest_returns_the_highest_gpu_layers_and_context_within_the_headroom() -> None:
    headroom = 4.0
    suggestion = suggest(SEED, headroom_gib=headroom)
    assert suggestion.gpu_layers is not None and suggestion.ctx_size is not None

    def spare(inputs: LlamaCppPlanInputs) -> int:
        vram = plan_llamacpp(inputs).devices["vram"]
        return (vram.capacity_bytes or 0) - vram.used_bytes

    at = replace(SEED, gpu_layers=suggestion.gpu_layers)
    assert spare(at) >= headroom * GIB
    assert spare(replace(at, gpu_layers=suggestion.gpu_layers + 1)) < headroom * GIB
    assert spare(replace(at, ctx_size=suggestion.ctx_size)) >= headroom * GIB
    assert spare(replace(at, ctx_size=suggestion.ctx_size + 1024)) < headroom * GIB


def test_suggest_finds_nothing_when_the_weights_alone_overflow() -> None:
    tiny_gpu = replace(SEED, vram_bytes=1 * GIB)
    assert suggest(tiny_gpu).gpu_layers is None


def test_standard_kv_formula_per_sequence_slots() -> None:
    shape = AttentionShape(kind="standard", n_layer=32, n_head_kv=(8,) * 32, head_k=128, head_v=128)
    kv = kv_cache_layers(shape, 32768, 1, "f16", "f16")
    assert kv.cache_bytes == 32 * 32768 * 8 * (128 + 128) * 2
    # -np 4 splits the same cells into 4 streams of pad256(c/4).
    assert kv_layout(10000, 4, False) == kv_layout(10000, 4, False)
    layout = kv_layout(10000, 4, False)
    assert (layout.cells, layout.streams) == (pad(pad(10000) // 4), 4)
    split = kv_cache_layers(shape, 10000, 4, "q8_0", "q4_0")
    row = row_bytes("q8_0", 8 * 128) + row_bytes("q4_0", 8 * 128)
    assert split.cache_bytes == 32 * layout.cells * 4 * row


def test_mla_kv_is_k_only_with_lora_rank_plus_rope() -> None:
    metadata = {
        "deepseek2.block_count": 61,
        "deepseek2.embedding_length": 7168,
        "deepseek2.attention.head_count": 128,
        "deepseek2.attention.head_count_kv": 1,
        "deepseek2.attention.key_length": 576,
        "deepseek2.attention.value_length": 512,
        "deepseek2.attention.kv_lora_rank": 512,
        "deepseek2.rope.dimension_count": 64,
    }
    shape = attention_shape("deepseek2", metadata)
    assert shape.kind == "mla"
    kv = kv_cache_layers(shape, 65536, 1, "f16", "f16")
    assert kv.cache_bytes == 61 * 65536 * 576 * 2


def test_attention_shape_reads_deepseek4_keys() -> None:
    assert V4_SHAPE.kind == "deepseek4"
    assert (V4_SHAPE.head_k, V4_SHAPE.sliding_window, V4_SHAPE.indexer_head) == (512, 128, 128)
    assert V4_SHAPE.compress_ratios.count(4) == 21
    assert V4_SHAPE.compress_ratios.count(128) == 20
    with pytest.raises(ValueError, match="sliding_window"):
        attention_shape(
            "deepseek4",
            {k: v for k, v in V4_METADATA.items() if not k.endswith("sliding_window")},
        )


def test_mi300x_plan_from_seed_002_fits_with_little_hbm_free() -> None:
    plan = plan_vllm(VllmPlanInputs())
    assert plan.fits
    hbm = plan.devices["hbm"]
    assert hbm.items["weights"] == int(156.67 * GIB)
    assert hbm.items["kv_cache"] == 20 * GB
    assert plan.devices["ram"].items["cpu_kv_tier"] == 96 * GIB
    assert plan.devices["disk"].capacity_bytes == 500 * GB
    assert any("HBM has" in a for a in plan.advice)
    assert set(plan.to_json()["devices"]) == {"hbm", "ram", "disk"}


def test_mi300x_hbm_refusal_names_the_kv_bytes_that_fit() -> None:
    inputs = VllmPlanInputs(kv_cache_memory_bytes=40 * GB)
    (message,) = plan_vllm(inputs).problems
    assert message.startswith("plan: does not fit in HBM: ")
    kv = suggested(r"lower server\.kvCacheMemoryBytes to at most (\d+) \(\d+ GiB\)", message)
    assert plan_vllm(replace(inputs, kv_cache_memory_bytes=kv)).fits


def test_vllm_kv_capacity_counts_a_requests_pages_as_vllm_does() -> None:
    # DeepSeek-V4-Flash per 256-token page: 21 C4A layers (64 states of 584 B, 576-aligned) and
    # their indexers (64 of 132 B), 20 C128A layers (2 of 584 B); a 128-token window of 584 B
    # per token on all 43 layers in 64-token pages.
    assert DEEPSEEK_V4_FLASH.page_bytes == 21 * 37440 + 21 * 8640 + 20 * 1728
    assert DEEPSEEK_V4_FLASH.window_page_bytes == 43 * 37440
    kv = plan_vllm(VllmPlanInputs(max_model_len=65536, max_num_batched_tokens=2048)).kv
    assert kv is not None
    # 256 pages of context, and cdiv(127 + 2 steps of 2048 tokens, 64) + 1 window pages.
    request = 256 * DEEPSEEK_V4_FLASH.page_bytes + 67 * DEEPSEEK_V4_FLASH.window_page_bytes
    assert kv.request_bytes == request
    assert kv.max_concurrency == 20 * GB / request
    # vLLM's get_kv_cache_capacity: int(concurrency * max_model_len).
    assert kv.gpu_tokens == int(20 * GB / request * 65536)
    assert kv.cpu_tier_tokens == int(96 * GIB / DEEPSEEK_V4_FLASH.bytes_per_token)


def test_vllm_kv_figures_follow_max_model_len_and_the_budget() -> None:
    def figures(**changes: int) -> tuple[float | None, int | None]:
        kv = plan_vllm(VllmPlanInputs(**changes)).kv  # type: ignore[arg-type]
        assert kv is not None
        return kv.max_concurrency, kv.gpu_tokens

    seed = figures()
    assert figures(max_model_len=65536) != seed
    assert figures(kv_cache_memory_bytes=10 * GB)[0] == pytest.approx(seed[0] / 2)  # type: ignore[operator]
    assert figures(cpu_kv_tier_bytes=0) == seed


def test_a_model_without_a_known_kv_layout_gets_no_token_figures_and_assumes_nothing() -> None:
    assert kv_layout_of("deepseek-ai/DeepSeek-V4-Flash-0731") is DEEPSEEK_V4_FLASH
    assert kv_layout_of("acme/Tiny-Checkpoint") is None
    plan = plan_vllm(VllmPlanInputs(kv_layout=None))
    assert plan.kv is not None and plan.kv.gpu_tokens is None and plan.assumptions == []
    assert plan.to_json()["kv_cache"]["max_concurrency"] is None
    assert "its tokens are not counted" in plan.report()


def test_vllm_refuses_a_max_model_len_one_request_of_which_outgrows_the_kv_budget() -> None:
    inputs = VllmPlanInputs(max_model_len=1 << 20, kv_cache_memory_bytes=2 * GB)
    (message,) = plan_vllm(inputs).problems
    assert message.startswith("plan: one request of 1,048,576 tokens needs 3.9 GiB of KV cache")
    longest = suggested(r"lower server\.maxModelLen to at most (\d+)", message)
    assert plan_vllm(replace(inputs, max_model_len=longest)).fits
    assert not plan_vllm(replace(inputs, max_model_len=longest + 256)).fits
    budget = suggested(r"raise server\.kvCacheMemoryBytes to at least (\d+)", message)
    assert plan_vllm(replace(inputs, kv_cache_memory_bytes=budget)).fits


def test_mi300x_ram_and_disk_refusals() -> None:
    ram = plan_vllm(VllmPlanInputs(host_ram_bytes=100 * GIB)).problems
    assert len(ram) == 1 and ram[0].startswith("plan: does not fit in host RAM: 128.0 GiB needed")
    tier = suggested(r"set server\.kvOffloadingSize to at most (\d+)", ram[0])
    assert plan_vllm(VllmPlanInputs(host_ram_bytes=100 * GIB, cpu_kv_tier_bytes=tier * GIB)).fits
    disk = plan_vllm(VllmPlanInputs(disk_bytes=200 * GB)).problems
    assert len(disk) == 1 and disk[0].startswith("plan: does not fit on disk: ")


NO_WEIGHT_SIZE = "model.sizeGib: required until the model is locked"


@pytest.mark.parametrize("name", ["strix-halo", "mi300x"])
def test_a_plan_without_lock_or_size_is_a_config_error(name: str) -> None:
    values = stack_values(name)
    del values["model"]["sizeGib"]
    stack = parse_stack(values)
    with pytest.raises(ConfigError) as caught:
        stack_plan(stack, unlocked_source(stack))
    (problem,) = caught.value.problems
    assert problem.startswith(NO_WEIGHT_SIZE)
    assert "llm-infra lock STACK" in problem


@pytest.mark.parametrize("key", ["deepseek4.attention.head_count", "deepseek4.embedding_length"])
def test_a_zero_count_in_the_metadata_is_a_config_error_naming_the_key(key: str) -> None:
    values = stack_values("strix-halo")
    values["model"]["metadata"] = {**values["model"].get("metadata", {}), key: 0}
    stack = strix(values)
    with pytest.raises(ConfigError) as caught:
        stack_plan(stack, unlocked_source(stack))
    assert caught.value.problems == [
        f"model.metadata: {key} is 0; it must be a positive count (lock the model, or add the key)"
    ]


def test_compute_buffers_follow_the_per_slot_context_with_several_slots() -> None:
    # Measured on an H200 through Vulkan (b11434, n_embd 1024, n_ff 2048, every layer on the
    # GPU, F16 cache) at -c 65536 -ub 512 -np 2: 52.1 MiB on the GPU, 40.1 MiB on the host;
    # the graph attends over one slot's 32768 cells, not the whole 65536.
    plan = plan_llamacpp(replace(VULKAN_MEASURED, parallel=2))
    assert plan.devices["vram"].items["compute"] / MIB == pytest.approx(52.1, rel=0.06)
    assert plan.devices["ram"].items["compute"] / MIB == pytest.approx(40.1, rel=0.02)
    # One slot of the same 65536 tokens: the whole context is one slot's graph.
    single = plan_llamacpp(VULKAN_MEASURED)
    assert single.devices["ram"].items["compute"] - plan.devices["ram"].items["compute"] == (
        2 * 32768 * 512
    )
