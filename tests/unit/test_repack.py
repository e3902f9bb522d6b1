"""The CPU repack rules of llama.cpp b11434 as the plan applies them (infra/plan/repack.py).

The rules are held to real load logs by tests/contract/test_plan_calibration.py (every variant
this machine runs) and by the AMX logs in tests/fixtures/cpu_variants/ (a CPU with AMX); these
tests pin the shape and type conditions and the plan's upper bound where it cannot know.
"""

from __future__ import annotations

import math

import pytest

from components.llamacpp.inputs import LlamaServerFlags
from components.llamacpp.manifests import llama_server_args
from components.validation import with_defaults
from infra.cpus import cpu_variant
from infra.plan.deepseek4 import AttentionShape
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, plan_llamacpp
from infra.plan.repack import MAX_GROWTH, MatmulWeight, repack, worst_repack
from infra.plan.report import GIB

AVX2_VARIANTS = ["haswell", "skylakex", "icelake", "zen4", "alderlake", "sapphirerapids"]
PRE_AVX2_VARIANTS = ["x64", "sse42", "sandybridge", "ivybridge", "piledriver"]


@pytest.mark.parametrize("variant", AVX2_VARIANTS)
def test_q4_0_weights_move_to_cpu_repack_with_avx2(variant: str) -> None:
    weights = [MatmulWeight("Q4_0", (4096, 1024), 3)]
    packed = repack(weights, cpu_variant(variant))
    expected = "AMX" if variant == "sapphirerapids" else "CPU_REPACK"
    assert set(packed.buffers) == {expected}
    assert packed.moved_bytes == 4096 * 1024 // 32 * 18 * 3


@pytest.mark.parametrize("variant", PRE_AVX2_VARIANTS)
def test_nothing_is_repacked_without_avx2(variant: str) -> None:
    weights = [MatmulWeight("Q4_0", (4096, 1024)), MatmulWeight("Q4_K", (4096, 1024, 8))]
    assert repack(weights, cpu_variant(variant)).buffers == {}


def test_q2_k_needs_avx512_and_q8_0_is_never_repacked_on_x86_without_amx() -> None:
    q2k = [MatmulWeight("Q2_K", (4096, 1024))]
    assert repack(q2k, "haswell").buffers == {}
    assert repack(q2k, "alderlake").buffers == {}
    assert repack(q2k, "zen4").buffers == {"CPU_REPACK": q2k[0].nbytes}
    assert repack([MatmulWeight("Q8_0", (4096, 1024))], "zen4").buffers == {}


def test_a_row_count_not_a_multiple_of_8_stays_in_the_model_buffer() -> None:
    assert repack([MatmulWeight("Q4_K", (4096, 1004))], "zen4").buffers == {}


def test_amx_stores_q8_0_rows_with_4_compensation_bytes_per_block() -> None:
    packed = repack([MatmulWeight("Q8_0", (256, 512), 2)], "sapphirerapids")
    assert packed.buffers == {"AMX": 2 * 512 * (256 // 32) * (34 + 4)}
    assert packed.moved_bytes == 2 * 512 * (256 // 32) * 34


def test_amx_takes_f16_but_leaves_experts_to_cpu_repack() -> None:
    f16 = MatmulWeight("F16", (256, 512))
    experts = MatmulWeight("Q4_K", (4096, 1024, 8))
    packed = repack([f16, experts], "sapphirerapids")
    assert packed.buffers == {"AMX": f16.nbytes, "CPU_REPACK": experts.nbytes}


def test_amx_needs_32_rows_and_whole_blocks_per_row() -> None:
    assert repack([MatmulWeight("F16", (256, 48))], "sapphirerapids").buffers == {}
    # 48 rows: not AMX; Q4_0 with 48 rows is still CPU_REPACK (a multiple of 8).
    assert repack([MatmulWeight("Q4_0", (256, 48))], "sapphirerapids").buffers == {
        "CPU_REPACK": MatmulWeight("Q4_0", (256, 48)).nbytes
    }


def test_an_unknown_cpu_budgets_the_variant_that_grows_the_weights_most() -> None:
    weights = [MatmulWeight("Q8_0", (4096, 1024)), MatmulWeight("Q4_K", (4096, 1024, 8))]
    assert worst_repack(weights) == repack(weights, "sapphirerapids")


def test_cpu_names_map_to_the_variant_ggml_picks() -> None:
    assert cpu_variant("zen5") == "zen4"
    assert cpu_variant("haswell") == "haswell"
    with pytest.raises(KeyError):
        cpu_variant("m68k")


def _inputs(**changes: object) -> LlamaCppPlanInputs:
    shape = AttentionShape(
        kind="standard", n_layer=4, n_head_kv=(4,) * 4, head_k=64, head_v=64, n_head=4,
        n_embd=256, n_ff=512, n_vocab=1000,
    )  # fmt: skip
    defaults: dict[str, object] = {
        "weights": ModelWeights.from_file_sizes(4 * GIB, 4),
        "attention": shape,
        "gpu_layers": 0,
        "ctx_size": 4096,
        "memory_limit_bytes": 32 * GIB,
        "cache_ram_mib": 0,
    }
    return LlamaCppPlanInputs(**{**defaults, **changes})  # type: ignore[arg-type]


def test_without_tensor_types_or_cpu_the_plan_budgets_the_upper_bound() -> None:
    ram = plan_llamacpp(_inputs()).devices["ram"].items
    assert ram["weights"] == 0
    assert ram["repacked_weights"] == math.ceil(4 * GIB * MAX_GROWTH)


def test_a_cpu_without_amx_keeps_the_total_exact_before_the_lock() -> None:
    ram = plan_llamacpp(_inputs(cpu_variant="zen4")).devices["ram"].items
    assert ram["weights"] == 4 * GIB
    assert ram["repacked_weights"] == 0


def test_with_tensor_types_the_plan_moves_exactly_the_repacked_weights() -> None:
    matmul = {str(il): (MatmulWeight("Q4_0", (256, 256), 4),) for il in range(4)}
    per_layer = MatmulWeight("Q4_0", (256, 256), 4).nbytes + 1024  # + an F32 norm
    weights = ModelWeights((per_layer,) * 4, 0, 0, "GGUF header", matmul)
    ram = plan_llamacpp(_inputs(weights=weights, cpu_variant="zen4")).devices["ram"].items
    assert ram["repacked_weights"] == 4 * MatmulWeight("Q4_0", (256, 256), 4).nbytes
    assert ram["weights"] == 4 * 1024
    off = plan_llamacpp(_inputs(weights=weights, cpu_variant="zen4", repack=False))
    assert off.devices["ram"].items["repacked_weights"] == 0


def test_quantized_weights_in_amx_are_refused_until_repack_is_off() -> None:
    q8 = MatmulWeight("Q8_0", (256, 256), 4)
    matmul = {str(il): (q8,) for il in range(4)}
    weights = ModelWeights((q8.nbytes,) * 4, 0, 0, "GGUF header", matmul)
    plan = plan_llamacpp(_inputs(weights=weights, cpu_variant="sapphirerapids"))
    (problem,) = plan.problems
    assert problem.startswith("plan: the node's CPU (sapphirerapids, memory.nodeCpu) would put ")
    assert "set server.repack: false (--no-repack)" in problem
    assert not plan_llamacpp(
        _inputs(weights=weights, cpu_variant="sapphirerapids", repack=False)
    ).problems
    # F16 in AMX runs no tile instruction: served, not refused.
    f16 = MatmulWeight("F16", (256, 256), 4)
    f16_weights = ModelWeights((f16.nbytes,) * 4, 0, 0, "GGUF header", {"0": (f16,)})
    assert not plan_llamacpp(_inputs(weights=f16_weights, cpu_variant="sapphirerapids")).problems


def test_no_repack_reaches_the_llama_server_argv() -> None:
    flags: LlamaServerFlags = {
        "model_path": "/models/m.gguf", "alias": "m", "host": "0.0.0.0", "port": 8080,
        "jinja": True, "gpu_layers": 0, "ctx_size": 4096, "parallel": 1, "cont_batching": True,
        "cache_type_k": "f16", "cache_type_v": "f16", "temperature": 1.0, "top_p": 1.0,
        "threads": 2,
    }  # fmt: skip
    # The builder takes the flags as the server's check leaves them: with their defaults.
    assert "--no-repack" not in llama_server_args(with_defaults(flags, LlamaServerFlags))
    no_repack = with_defaults(LlamaServerFlags(**flags, repack=False), LlamaServerFlags)
    assert llama_server_args(no_repack)[-1] == "--no-repack"
