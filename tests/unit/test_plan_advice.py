"""Advice that holds: every fix the plan names, and every `--suggest` result, applied to the stack,
gives a stack that passes every check and fits; where nothing fits, the plan says which
constraint decides."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.cli.plan import suggest_changes
from infra.config import ConfigError
from infra.plan.llamacpp import suggest
from infra.plan.report import Plan
from infra.plan.stack import llamacpp_inputs
from infra.targets.registry import stack_plan
from tests.conftest import stack_values, strix, unlocked_source
from tests.support.profiles import examples

# A Qwen3-30B-A3B-shaped GQA MoE (qwen3moe: 48 layers, 32 heads, 4 KV heads of 128, trained
# for 40960 tokens), planned from the stack file's metadata before a lock.
QWEN3MOE = {
    "architecture": "qwen3moe",
    "layers": 48,
    "sizeGib": 17.3,
    "metadata": {
        "qwen3moe.block_count": 48,
        "qwen3moe.context_length": 40960,
        "qwen3moe.embedding_length": 2048,
        "qwen3moe.attention.head_count": 32,
        "qwen3moe.attention.head_count_kv": 4,
        "qwen3moe.attention.key_length": 128,
        "qwen3moe.attention.value_length": 128,
        "qwen3moe.expert_feed_forward_length": 768,
        "qwen3moe.expert_count": 128,
        "qwen3moe.expert_used_count": 8,
        "qwen3moe.vocab_size": 151936,
    },
}


def base(model: str) -> dict[str, Any]:
    values = copy.deepcopy(stack_values("strix-halo"))
    if model == "qwen3moe":
        values["model"].update(copy.deepcopy(QWEN3MOE))
        values["server"].update(minSlotContext=8192, contextSize=32768, gpuLayers=49)
    return values


def set_key(values: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    where = values
    for part in path:
        where = where.setdefault(part, {})
    where[last] = value


def plan_of(values: dict[str, Any]) -> Plan:
    stack = strix(values)
    return stack_plan(stack, unlocked_source(stack))


@st.composite
def stacks(draw: st.DrawFn) -> dict[str, Any]:
    values = base(draw(st.sampled_from(["deepseek4", "qwen3moe"])))
    layers = values["model"]["layers"]
    trained = values["model"]["metadata"].get("qwen3moe.context_length", 1 << 20)
    parallel = draw(st.integers(1, 4))
    floor = draw(st.sampled_from([4096, 8192, 16384, 32768]))
    per_slot = draw(st.integers(floor // 1024, min(trained, 1 << 18) // 1024)) * 1024
    server = values["server"]
    server.update(
        gpuLayers=draw(st.integers(0, layers + 1)),
        parallel=parallel,
        minSlotContext=floor,
        contextSize=per_slot * parallel,
    )
    if draw(st.booleans()):
        server["cacheRam"] = draw(st.sampled_from([0, 1024, 8192, 16384]))
    cache = draw(st.sampled_from(["q8_0", "f16"]))  # deepseek4 needs K = V
    server.update(cacheTypeK=cache, cacheTypeV=cache)
    memory = draw(st.integers(6, 40))
    server["resources"]["limits"]["memory"] = f"{memory}Gi"
    server["resources"]["requests"]["memory"] = "2Gi"
    values["memory"]["vramGib"] = draw(st.sampled_from([8, 16, 24, 48, 64, 90, 96, 128]))
    values["memory"].pop("computeGib", None)
    if draw(st.booleans()):
        # The node's RAM: a unified-memory box whose carve-out is the GPU's, or a discrete GPU.
        carve = draw(st.sampled_from([0, values["memory"]["vramGib"]]))
        values["memory"]["node"] = {"ramGib": carve + draw(st.sampled_from([8, 16, 32, 64]))}
        if carve:
            values["memory"]["node"]["carveOutGib"] = carve
    values["store"]["size"] = f"{draw(st.integers(10, 200))}Gi"
    return values


def applied(values: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    fixed = copy.deepcopy(values)
    for key, value in changes.items():
        set_key(fixed, key, value)
    return fixed


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks())
def test_every_fix_the_plan_names_gives_a_stack_that_passes_and_fits(
    values: dict[str, Any],
) -> None:
    plan = plan_of(values)
    for problem in plan.problems:
        # A refusal names a fix that holds, or which constraint leaves none.
        assert (
            any(fix.text in problem for fix in plan.fixes)
            or "decides" in problem
            or ("at any server.gpuLayers" in problem)
        ), problem
    for fix in plan.fixes:
        try:
            after = plan_of(applied(values, fix.changes))
        except ConfigError as exc:
            pytest.fail(f"{fix.text} {fix.changes}: the stack's checks refuse it: {exc.problems}")
        assert after.fits, (fix.text, fix.changes, after.problems)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks(), st.sampled_from([0.0, 2.0, 4.0]))
def test_every_suggestion_passes_every_check_and_fits(
    values: dict[str, Any], headroom: float
) -> None:
    stack = strix(values)
    best = suggest(llamacpp_inputs(stack, unlocked_source(stack)), headroom_gib=headroom)
    changes = suggest_changes(best)
    if not changes:
        assert best.reason and "server.minSlotContext" in best.reason
        return
    after = plan_of(applied(values, changes))
    assert after.fits, (changes, after.problems)
    vram = after.devices["vram"]
    assert (vram.capacity_bytes or 0) - vram.used_bytes >= headroom * 2**30


def test_four_slots_of_the_trained_context_advise_what_fits_and_hold() -> None:
    # The walk: 4 slots of 64k of a 40960-token model on 90 GiB.
    values = base("qwen3moe")
    values["server"].update(parallel=4, contextSize=4 * 65536, minSlotContext=65536)
    with pytest.raises(ConfigError) as caught:
        plan_of(values)
    (problem,) = caught.value.problems
    assert problem.startswith(
        "server.contextSize: 262144 gives each of the 4 slots 65536 tokens, more than the "
        "model's trained context 40960 (qwen3moe.context_length)"
    )
    assert (
        "lower server.minSlotContext to 40960 and server.contextSize to 163840 "
        "(server.minSlotContext 65536 is more than the model serves)"
    ) in problem
    assert "--rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 40960" in problem
    fixed = applied(values, {"server.minSlotContext": 40960, "server.contextSize": 163840})
    assert plan_of(fixed).fits


def four_full_slots(cache: str, vram_gib: int) -> dict[str, Any]:
    """qwen3moe with every layer on the GPU, four slots of its trained context, `cache` K and V."""
    values = base("qwen3moe")
    values["server"].update(
        parallel=4, contextSize=4 * 40960, cacheTypeK=cache, cacheTypeV=cache, gpuLayers=49
    )
    values["memory"]["vramGib"] = vram_gib
    values["memory"].pop("computeGib", None)
    return values


def test_the_cheapest_fix_comes_first_a_quantized_kv_cache_then_context_then_layers() -> None:
    values = four_full_slots("f16", 32)
    plan = plan_of(values)
    assert not plan.fits
    texts = [fix.text for fix in plan.fixes]
    assert texts[0] == "set server.cacheTypeK and server.cacheTypeV to q8_0 (half the KV cache)"
    assert texts[1].startswith("lower server.contextSize") and texts[2].startswith(
        "set server.gpuLayers"
    )
    (problem,) = plan.problems
    assert problem.index("q8_0") < problem.index("server.contextSize") < problem.index("gpuLayers")
    assert plan_of(applied(values, plan.fixes[0].changes)).fits  # every layer stays on the GPU


def test_a_cache_already_quantized_gets_no_cache_advice() -> None:
    plan = plan_of(four_full_slots("q8_0", 20))
    assert not plan.fits
    assert not any("cacheType" in fix.text for fix in plan.fixes)


def test_suggest_names_min_slot_context_when_it_decides() -> None:
    values = base("qwen3moe")
    values["memory"]["vramGib"] = 2
    values["server"].update(gpuLayers=0, minSlotContext=32768)
    stack = strix(values)
    best = suggest(llamacpp_inputs(stack, unlocked_source(stack)), headroom_gib=4)
    assert best.gpu_layers is None
    assert best.reason is not None and "server.minSlotContext 32768" in best.reason


def test_suggest_sizes_a_model_trained_on_fewer_tokens_than_a_step() -> None:
    values = base("qwen3moe")
    values["model"]["metadata"]["qwen3moe.context_length"] = 256
    values["server"].update(minSlotContext=256, contextSize=512, parallel=2)
    stack = strix(values)
    best = suggest(llamacpp_inputs(stack, unlocked_source(stack)), headroom_gib=4)
    assert best.reason is None and best.ctx_size == 512
    assert plan_of(applied(values, suggest_changes(best))).fits


def test_yarn_in_extra_args_extends_the_context_a_slot_serves() -> None:
    # Qwen's own advice for 128k: YaRN x4 over the 32768 tokens it was trained on natively.
    values = base("qwen3moe")
    values["server"].update(contextSize=131072, minSlotContext=65536)
    with pytest.raises(ConfigError, match="more than the model's trained context 40960"):
        plan_of(values)
    values["server"]["extraArgs"] = [
        "--rope-scaling", "yarn", "--rope_scale", "4", "--yarn-orig-ctx", "32768",
    ]  # fmt: skip
    stack = strix(values)
    assert llamacpp_inputs(stack, unlocked_source(stack)).context_limit == 131072
    # A scale too small for the context is still refused, with the scale that would do.
    values["server"]["extraArgs"][3] = "2"
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "raise the YaRN scale in server.extraArgs: --rope-scaling yarn --rope-scale 4 "
            "--yarn-orig-ctx 32768"
        ),
    ):
        plan_of(values)


def test_the_node_ram_bounds_the_container_limit_and_every_fix() -> None:
    # A 128 GiB box with a 96 GiB carve-out: 28 GiB for the container once the OS and k3s
    # (reservedGib 4) have theirs. The reference model with 10 layers on the CPU needs more.
    values = base("deepseek4")
    values["memory"].update(vramGib=96, node={"ramGib": 128, "carveOutGib": 96})
    values["server"].update(gpuLayers=34)
    values["server"]["resources"]["limits"]["memory"] = "41Gi"
    plan = plan_of(values)
    node = plan.devices["node"]
    assert node.capacity_bytes == 28 * 2**30
    assert any("does not fit in the node's RAM" in p for p in plan.problems)
    for fix in plan.fixes:
        limit = fix.changes.get("server.resources.limits.memory", "41Gi")
        assert int(limit.removesuffix("Gi")) <= 28, fix.text
        assert plan_of(applied(values, fix.changes)).fits, fix.text
    # Where the buffers fit the node, a limit above what it gives is refused, lowered to it.
    values["server"].update(gpuLayers=44)
    plan = plan_of(values)
    (problem,) = plan.problems
    assert "server.resources.limits.memory 41 GiB is more than the 28 GiB the node" in problem
    assert problem.endswith("lower server.resources.limits.memory to 28Gi")
    # Without memory.node, the limit alone is checked, as before.
    del values["memory"]["node"]
    assert plan_of(values).fits


def locked_moe() -> tuple[dict[str, Any], Any]:
    """The header-only Qwen3-30B-A3B (17 GiB, 128 experts a layer) as a locked stack's model,
    its header listing every tensor: every layer on the GPU, a q8_0 cache already."""
    import io

    from components.gguf_header import read_gguf_header, summarize
    from components.payloads.fetcher import ModelFile
    from infra.hub.gguf_stub import (
        SAMPLE_FILE,
        Qwen3MoeShape,
        header_bytes,
        qwen3moe_metadata,
        qwen3moe_tensors,
    )
    from infra.lock import ModelSource

    shape = Qwen3MoeShape()
    header, data = header_bytes(qwen3moe_metadata(shape, "MoE"), qwen3moe_tensors(shape))
    summary = summarize([read_gguf_header(io.BytesIO(header))])
    values = base("qwen3moe")
    for key in ("architecture", "layers", "sizeGib", "metadata"):
        values["model"].pop(key)
    values["model"]["files"] = [SAMPLE_FILE]
    values["server"].update(gpuLayers=49, contextSize=40960, minSlotContext=8192)
    values["memory"].pop("computeGib", None)
    values["memory"]["vramGib"] = 14
    files = [ModelFile(name=SAMPLE_FILE, path=SAMPLE_FILE, size=len(header) + data)]
    return values, ModelSource(revision="0" * 40, files=files, locked=True, gguf=summary)


def test_the_experts_to_the_cpu_come_before_whole_layers() -> None:
    values, source = locked_moe()
    plan = stack_plan(strix(values), source)
    assert not plan.fits
    texts = [fix.text for fix in plan.fixes]
    # The weights alone are more than the GPU: no context fits, so the experts' move comes
    # first and whole layers to the CPU last.
    assert texts[0].startswith("add --n-cpu-moe "), texts
    assert texts[-1].startswith("set server.gpuLayers"), texts
    (problem,) = plan.problems
    assert problem.index("--n-cpu-moe") < problem.index("server.gpuLayers to at most")
    # Applied, every layer's attention and KV cache stay on the GPU, and the plan fits.
    changes = plan.fixes[0].changes
    layers = int(changes["server.extraArgs"][-1])
    assert changes["server.extraArgs"] == ["--n-cpu-moe", str(layers)] and 0 < layers < 48
    after = stack_plan(strix(applied(values, changes)), source)
    assert after.fits, after.problems
    assert after.devices["vram"].items["kv_cache"] == plan.devices["vram"].items["kv_cache"]
    # The fewest layers that fit: one layer fewer does not.
    fewer = applied(values, {"server.extraArgs": ["--n-cpu-moe", str(layers - 1)]})
    assert not stack_plan(strix(fewer), source).devices["vram"].fits


def test_an_f16_cache_is_quantized_before_the_experts_move() -> None:
    values, source = locked_moe()
    values["server"].update(cacheTypeK="f16", cacheTypeV="f16")
    values["memory"]["vramGib"] = 20
    plan = stack_plan(strix(values), source)
    texts = [fix.text for fix in plan.fixes]
    # In order of cost: the cache, the experts, the context, whole layers.
    starts = ["set server.cacheTypeK and server.cacheTypeV to q8_0", "add --n-cpu-moe",
              "lower server.contextSize", "set server.gpuLayers"]  # fmt: skip
    assert [next(i for i, s in enumerate(starts) if t.startswith(s)) for t in texts] == [0, 1, 2, 3]
    for fix in plan.fixes:
        after = stack_plan(strix(applied(values, fix.changes)), source)
        assert after.fits, (fix.text, after.problems)


def _messages_of(values: dict[str, Any]) -> list[str]:
    """What the stack's checks, then its plan, say of it (refusals and advice)."""
    try:
        plan = plan_of(values)
    except ConfigError as exc:
        return exc.problems
    return [*plan.problems, *plan.advice]


def test_every_message_server_min_slot_context_causes_names_it() -> None:
    """A hand-written stack need not know the key exists: each refusal or advice that the
    default 65536 per slot decides says `server.minSlotContext`."""
    one_slot_short = base("qwen3moe")
    one_slot_short["server"].update(contextSize=4096, minSlotContext=8192)
    two_slots = base("deepseek4")
    two_slots["server"].update(parallel=2, contextSize=65536)
    assert "minSlotContext" not in two_slots["server"]  # the default decides
    beyond_trained = base("qwen3moe")
    beyond_trained["server"].update(contextSize=65536, minSlotContext=65536)
    small_gpu = four_full_slots("q8_0", 22)
    small_gpu["server"]["minSlotContext"] = 32768
    small_gpu["server"]["contextSize"] = 4 * 32768
    small_gpu["model"]["metadata"]["qwen3moe.context_length"] = 65536
    # A shorter context would fit the GPU, but not one slot of server.minSlotContext.
    one_slot = four_full_slots("q8_0", 18)
    one_slot["server"].update(parallel=1, contextSize=32768, minSlotContext=32768)
    cases = {
        "a shorter context the key forbids": one_slot,
        "a context below one slot": one_slot_short,
        "two slots of the default": two_slots,
        "more than the model was trained on": beyond_trained,
        "fewer slots fit the GPU": small_gpu,
    }
    for what, values in cases.items():
        messages = _messages_of(values)
        assert messages, what
        assert all("server.minSlotContext" in m for m in messages if "contextSize" in m), (
            what,
            messages,
        )
        assert any("server.minSlotContext" in m for m in messages), (what, messages)
