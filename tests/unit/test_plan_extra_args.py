"""The memory plan of llama-server extra arguments: counted from real GGUF headers, or refused."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from components.extra_args import llama_server_options, owned_spellings
from components.llamacpp.inputs import OWNED_OPTIONS, REFUSED_OPTIONS
from infra.config import parse_stack
from infra.plan.deepseek4 import attention_shape
from infra.plan.extra_args import (
    COUNTED,
    NEUTRAL,
    NEUTRAL_SPELLINGS_OF,
    UNCOUNTABLE,
    UNCOUNTABLE_SPELLINGS,
    extra_args_effect,
    extra_args_problems,
    with_extra_args,
)
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, plan_llamacpp
from infra.plan.report import GIB
from infra.plan.stack import llamacpp_inputs
from infra.targets.registry import stack_plan
from tests.conftest import stack_values, strix, unlocked_source
from tests.support.tiny_gguf import TinyLlamaSpec, header_summary, write_tiny_model

TABLE = llama_server_options()


def test_every_llama_server_option_is_classified_once() -> None:
    """Each option extra words may pass is in one class; one the program renders (or refuses)
    is in none, or in NEUTRAL where it changes no memory (a new flag of a neutral option leaves
    the plan as it is), never counted or uncountable here (its key is what the plan reads)."""
    owned = set(owned_spellings(TABLE, OWNED_OPTIONS))
    refused = {TABLE.lookup(name) for name in REFUSED_OPTIONS}
    classes = [set(COUNTED), set(NEUTRAL), set(UNCOUNTABLE) | set(NEUTRAL_SPELLINGS_OF)]
    for option in TABLE.options:
        where = [index for index, names in enumerate(classes) if option.name in names]
        if option in refused:
            assert where == [], (option.name, where)
        elif option in owned:
            assert where in ([], [1]), (option.name, where)
        else:
            assert len(where) == 1, (option.name, where)
    named = set().union(*classes)
    assert named <= {o.name for o in TABLE.options}, named - {o.name for o in TABLE.options}
    for spelling in UNCOUNTABLE_SPELLINGS:
        found = TABLE.lookup(spelling)
        assert found is not None and found.name in NEUTRAL_SPELLINGS_OF, spelling


def summary_of(paths: list[Path]) -> dict[str, Any]:
    return header_summary(paths)


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real 4-layer llama GGUF (Q8_0 weights)."""
    spec = TinyLlamaSpec(4, 256, 4, 4, 512, gguf.GGMLQuantizationType.Q8_0)
    return summary_of(write_tiny_model(tmp_path_factory.mktemp("dense"), "dense", 1, spec))


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real GGUF with MoE layers: 3-D expert weights beside the attention of each layer."""
    path = tmp_path_factory.mktemp("moe") / "moe.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(3)
    writer.add_embedding_length(64)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_feed_forward_length(128)
    writer.add_context_length(4096)
    writer.add_tensor("token_embd.weight", np.zeros((32, 64), dtype=np.float32))
    for il in range(3):
        writer.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
        for part in ("gate", "up"):
            writer.add_tensor(
                f"blk.{il}.ffn_{part}_exps.weight", np.zeros((4, 32, 64), dtype=np.float16)
            )
        writer.add_tensor(f"blk.{il}.ffn_down_exps.weight", np.zeros((4, 64, 32), np.float16))
        writer.add_tensor(f"blk.{il}.ffn_up_shexp.weight", np.zeros((32, 64), np.float16))
    writer.add_tensor("output.weight", np.zeros((32, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return summary_of([path])


def inputs_of(summary: dict[str, Any], gpu_layers: int, **changes: Any) -> LlamaCppPlanInputs:
    base = LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary, "GGUF header"),
        attention=attention_shape("llama", summary["metadata"], summary.get("vocab_size")),
        gpu_layers=gpu_layers,
        ctx_size=4096,
        vram_bytes=16 * GIB,
        memory_limit_bytes=16 * GIB,
        cpu_variant="x64",
    )
    return replace(base, **changes)


def weights(summary: dict[str, Any], words: list[str], gpu_layers: int) -> tuple[int, int]:
    """(VRAM weights, RAM weights + repacked) of the plan with these extra words."""
    plan = plan_llamacpp(with_extra_args(inputs_of(summary, gpu_layers), words, summary))
    ram = plan.devices["ram"].items
    return plan.devices["vram"].items["weights"], ram["weights"] + ram["repacked_weights"]


def tensor_bytes(summary: dict[str, Any], names: list[str]) -> int:
    """Bytes of these tensors as the GGUF header gives them (the plan's summary aside)."""
    from components.gguf_header import tensor_key_bytes

    return sum(tensor_key_bytes(summary["tensors"][name]) for name in names)


def test_an_override_to_cpu_moves_the_matching_tensors_bytes_from_vram_to_ram(
    dense: dict[str, Any],
) -> None:
    vram, ram = weights(dense, [], 5)
    words = ["-ot", r"blk\.(1|3)\.ffn_(up|down)=CPU"]
    moved_vram, moved_ram = weights(dense, words, 5)
    moved = tensor_bytes(dense, [f"blk.{i}.ffn_{p}.weight" for i in (1, 3) for p in ("up", "down")])
    assert moved > 0
    assert (vram - moved_vram, moved_ram - ram) == (moved, moved)


def test_n_cpu_ffn_moves_the_dense_ffn_of_the_first_layers(dense: dict[str, Any]) -> None:
    vram, _ = weights(dense, [], 5)
    moved_vram, _ = weights(dense, ["--n-cpu-ffn", "2"], 5)
    names = [f"blk.{i}.ffn_{p}.weight" for i in (0, 1) for p in ("up", "down", "gate")]
    assert vram - moved_vram == tensor_bytes(dense, names)


def test_an_override_of_a_layer_already_on_the_cpu_changes_nothing(dense: dict[str, Any]) -> None:
    # -ngl 3 of 4 layers: the output layer and layers 2-3 on the GPU; 0 and 1 on the CPU.
    assert weights(dense, ["-ot", r"blk\.[01]\.=CPU"], 3) == weights(dense, [], 3)


def test_n_cpu_moe_moves_only_the_experts_of_the_first_n_layers(moe: dict[str, Any]) -> None:
    vram, ram = weights(moe, [], 4)
    moved_vram, moved_ram = weights(moe, ["--n-cpu-moe", "2"], 4)
    experts = [f"blk.{i}.ffn_{p}_exps.weight" for i in (0, 1) for p in ("gate", "up", "down")]
    assert (vram - moved_vram, moved_ram - ram) == (tensor_bytes(moe, experts),) * 2


def test_cpu_moe_moves_every_layers_experts_and_no_shared_expert(moe: dict[str, Any]) -> None:
    vram, _ = weights(moe, [], 4)
    moved_vram, _ = weights(moe, ["--cpu-moe"], 4)
    experts = [f"blk.{i}.ffn_{p}_exps.weight" for i in range(3) for p in ("gate", "up", "down")]
    assert vram - moved_vram == tensor_bytes(moe, experts)


def test_the_first_matching_override_decides_as_in_llama_cpp(moe: dict[str, Any]) -> None:
    # blk.0's experts first match the override to the GPU's buffer: they stay there.
    effect = extra_args_effect(["-ot", r"blk\.0\.=Vulkan0,exps=CPU"])
    assert [o.buffer for o in effect.overrides] == ["Vulkan0", "CPU"]
    vram, _ = weights(moe, [], 4)
    moved_vram, _ = weights(moe, ["-ot", r"blk\.0\.=Vulkan0,exps=CPU"], 4)
    experts = [f"blk.{i}.ffn_{p}_exps.weight" for i in (1, 2) for p in ("gate", "up", "down")]
    assert vram - moved_vram == tensor_bytes(moe, experts)
    assert any("counts tensors moved to CPU only" in p for p in effect.problems)


def test_overridden_quantized_weights_are_repacked_like_any_cpu_weight(tmp_path: Path) -> None:
    spec = TinyLlamaSpec(4, 256, 4, 4, 512, gguf.GGMLQuantizationType.Q4_0)
    q4 = summary_of(write_tiny_model(tmp_path, "q4", 1, spec))
    words = ["-ot", r"blk\.3\.ffn_up=CPU"]
    before = plan_llamacpp(inputs_of(q4, 5, cpu_variant="haswell")).devices["ram"].items
    inputs = with_extra_args(inputs_of(q4, 5, cpu_variant="haswell"), words, q4)
    ram = plan_llamacpp(inputs).devices["ram"].items
    # Q4_0 on an AVX2 CPU goes to CPU_REPACK: the moved tensor is in the repack row.
    moved = tensor_bytes(q4, ["blk.3.ffn_up.weight"])
    assert ram["repacked_weights"] - before["repacked_weights"] == moved
    assert ram["weights"] == before["weights"]


def test_batch_and_ubatch_reach_the_compute_buffers(dense: dict[str, Any]) -> None:
    inputs = with_extra_args(inputs_of(dense, 5), ["-b", "4096", "--ubatch-size", "1024"], dense)
    assert (inputs.batch, inputs.ubatch) == (4096, 1024)
    before = plan_llamacpp(inputs_of(dense, 5)).devices["vram"].items["compute"]
    assert plan_llamacpp(inputs).devices["vram"].items["compute"] > before


@pytest.mark.parametrize(
    ("words", "field", "value"),
    [
        (["-fa", "off"], "flash_attn", False),
        (["--flash-attn", "on"], "flash_attn", True),
        (["-kvu"], "kv_unified", True),
        (["-no-kvu"], "kv_unified", False),
        (["--swa-full"], "swa_full", True),
    ],
)
def test_the_plans_own_settings_follow_the_words(
    dense: dict[str, Any], words: list[str], field: str, value: bool
) -> None:
    assert getattr(with_extra_args(inputs_of(dense, 5), words, dense), field) is value


@pytest.mark.parametrize(
    ("words", "reason"),
    [
        (["--no-kv-offload"], "keeps the KV cache in host RAM"),
        (["-nkvo"], "keeps the KV cache in host RAM"),
        (["--lora", "/models/a.gguf"], "adapter weights"),
        (["--mmproj", "/models/p.gguf"], "multimodal projector"),
        (["--ctx-checkpoints", "4"], "context checkpoints"),
        (["--override-kv", "llama.block_count=int:2"], "model metadata"),
        (["--split-mode", "row"], "otherwise than by layer"),
    ],
)
def test_an_option_that_changes_memory_uncountably_is_refused_with_the_reason(
    dense: dict[str, Any], words: list[str], reason: str
) -> None:
    (problem,) = extra_args_problems(words, dense)
    assert problem.startswith(f"plan: server.extraArgs[0]: {words[0]} changes memory the plan ")
    assert reason in problem and "memory.check: false" in problem


def test_the_default_spellings_of_an_uncountable_option_pass(dense: dict[str, Any]) -> None:
    assert extra_args_problems(["-kvo", "--op-offload", "--no-mmproj"], dense) == []


def test_neutral_options_change_nothing(dense: dict[str, Any]) -> None:
    words = ["--tags", "x", "--seed", "3", "--no-warmup", "--log-prefix"]
    assert extra_args_problems(words, dense) == []
    # The inputs keep the words (a fix that adds one keeps them), and no budget moves.
    after = with_extra_args(inputs_of(dense, 5), words, dense)
    assert replace(after, extra_args=(), tensors=None) == inputs_of(dense, 5)
    assert plan_llamacpp(after).devices == plan_llamacpp(inputs_of(dense, 5)).devices


def old_summary(summary: dict[str, Any]) -> dict[str, Any]:
    older = {k: v for k, v in summary.items() if k != "tensors"}
    return {**older, "schema": 2}


@pytest.mark.parametrize("words", [["--n-cpu-moe", "2"], ["--cpu-moe"], ["-ot", "exps=CPU"]])
def test_tensor_overrides_without_per_tensor_sizes_are_refused_naming_the_lock(
    moe: dict[str, Any], words: list[str]
) -> None:
    for summary, have in ((old_summary(moe), "(schema 2) has no"), (None, "not locked yet")):
        (problem,) = extra_args_problems(words, summary)
        assert problem.startswith(f"plan: server.extraArgs[0] {words[0]}: keeps tensors")
        assert have in problem and problem.endswith("run llm-infra lock STACK")
        # Nothing is moved on a guess.
        assert with_extra_args(inputs_of(moe, 4), words, summary).cpu_tensors.bytes_by_where == {}


def test_a_stack_plan_refuses_what_it_cannot_count_under_the_stacks_key() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"]["extraArgs"] = ["-ub", "1024", "--no-kv-offload", "--n-cpu-moe", "3"]
    stack = strix(values)
    source = unlocked_source(stack)
    plan = stack_plan(stack, source)
    extra = [p for p in plan.problems if "extraArgs" in p]
    assert [p.split(":")[1].strip() for p in extra] == [
        "server.extraArgs[2]",
        "server.extraArgs[3] --n-cpu-moe",
    ]
    assert llamacpp_inputs(stack, source).ubatch == 1024


def test_a_fleet_plan_names_the_server_entry() -> None:
    from infra.config import FleetStack

    values = copy.deepcopy(stack_values("strix-halo-pair"))
    values["servers"][1]["extraArgs"] = ["--lora", "/models/a.gguf"]
    fleet = parse_stack(values)
    assert isinstance(fleet, FleetStack)
    plan = stack_plan(fleet, [unlocked_source(fleet)] * len(fleet.servers))
    assert any(p.startswith("plan: servers[1].extraArgs[0]: --lora ") for p in plan.problems)


@pytest.mark.parametrize("words", [["--cpu-moe"], ["--n-cpu-moe", "1"], ["-ot", "up_exps=CPU"]])
def test_one_gpu_and_one_rpc_device_hold_the_same_weights_under_overrides(
    moe: dict[str, Any], words: list[str]
) -> None:
    """The local-GPU placement and the split placement (which the contract test holds to the
    real llama-server's buffers) agree on what the overrides move."""
    from infra.plan.llamacpp import RpcDevice

    local = plan_llamacpp(with_extra_args(inputs_of(moe, 4), words, moe)).devices
    split_inputs = inputs_of(moe, 4, vram_bytes=None, rpc_devices=(RpcDevice("w", 16 * GIB),))
    split = plan_llamacpp(with_extra_args(split_inputs, words, moe)).devices
    assert local["vram"].items["weights"] == split["vram:w"].items["weights"]
    assert local["ram"].items["weights"] == split["ram"].items["weights"]


def test_every_vllm_option_is_classified_once() -> None:
    from components.extra_args import vllm_serve_options
    from components.vllm.inputs import OWNED_OPTIONS as VLLM_OWNED
    from components.vllm.inputs import REFUSED_OPTIONS as VLLM_REFUSED
    from infra.plan.vllm_extra_args import NEUTRAL as VLLM_NEUTRAL
    from infra.plan.vllm_extra_args import NEUTRAL_GROUPS
    from infra.plan.vllm_extra_args import UNCOUNTABLE as VLLM_UNCOUNTABLE

    table = vllm_serve_options()
    component = set(owned_spellings(table, VLLM_OWNED)) | {
        table.lookup(name) for name in VLLM_REFUSED
    }
    for option in table.options:
        assert option.group is not None, option.name
        named = (option.name in VLLM_NEUTRAL) + (option.name in VLLM_UNCOUNTABLE)
        if option in component:
            assert named == 0, option.name
        elif option.group in NEUTRAL_GROUPS:
            assert option.name not in VLLM_NEUTRAL, f"{option.name}: its group is neutral"
        else:
            assert named == 1, (option.name, option.group)
    names = {o.name for o in table.options}
    assert set(VLLM_NEUTRAL) | set(VLLM_UNCOUNTABLE) <= names


def test_a_vllm_stack_plan_refuses_what_it_cannot_count() -> None:
    values = copy.deepcopy(stack_values("mi300x"))
    values["server"]["extraArgs"] = ["--enforce-eager", "--cpu-offload-gb", "10", "-pp", "2"]
    stack = parse_stack(values)
    plan = stack_plan(stack, unlocked_source(stack))
    refused = [p for p in plan.problems if "extraArgs" in p]
    assert [p.split(":")[1].strip() for p in refused] == [
        "server.extraArgs[1]",
        "server.extraArgs[3]",
    ]
    assert "changes the weights' size or place" in refused[0]
    assert "more GPUs or processes" in refused[1]


def test_the_plan_report_leads_with_a_refusal_no_device_is_over_for() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"]["extraArgs"] = ["--no-kv-offload"]
    stack = strix(values)
    plan = stack_plan(stack, unlocked_source(stack))
    assert not plan.fits
    lines = plan.report().splitlines()
    assert lines[0] == "verdict: DOES NOT FIT"
    assert lines[1].startswith("plan: server.extraArgs[0]: --no-kv-offload changes memory")
