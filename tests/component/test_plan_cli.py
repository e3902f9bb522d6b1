"""`llm-infra plan` and the plan gate of render / preview / up."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.cli import run_cli
from tests.support.render import STACK_FILE, render


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["plan", *args], cwd=ROOT)


def variant(tmp_path: Path, old: str, new: str) -> Path:
    text = STACK_FILE.read_text()
    assert old in text
    path = tmp_path / "Pulumi.variant.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_plan_prints_the_verdict_first_a_bar_per_device_then_the_budget_in_gib() -> None:
    result = plan("strix-halo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "verdict: fits"
    bars = {line.split()[0]: line for line in lines if line[6:7] == "["}
    assert list(bars) == ["vram", "ram", "disk"]
    assert bars["vram"].endswith("]  81.1/90.0 GiB  8.9 GiB free")
    bar = bars["vram"][bars["vram"].index("[") + 1 : bars["vram"].index("]")]
    assert len(bar) == 40 and bar.startswith("W" * 30) and bar.endswith("....")
    assert "W weights  K kv_cache  C compute" in result.stdout
    header = lines.index("component" + " " * 39 + "GiB  where")
    assert lines[header + 1] == "weights (39 of 43 layers + output)            78.91  VRAM"
    # One unit in the column: a 13 MiB row is 0.01 GiB, not `13 MiB`.
    assert "KV cache (CPU layers)                          0.01  RAM (container)" in lines
    assert "weights from: file sizes + layer structure" in result.stdout
    assert "seed 000 assumed" not in result.stdout and "(2 notes: -v shows them)" in lines
    verbose = plan("strix-halo", "-v")
    assert "seed 000 assumed (~1.6 GiB" in verbose.stdout


def test_a_plan_that_does_not_fit_says_by_how_much_first(tmp_path: Path) -> None:
    result = plan(str(variant(tmp_path, "vramGib: 90", "vramGib: 80")))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "verdict: DOES NOT FIT (vram over by 1.1 GiB)"
    assert lines[1].startswith("plan: does not fit in VRAM: ")
    vram = next(line for line in lines if line.startswith("vram  ["))
    assert vram.endswith("81.1/80.0 GiB  over by 1.1 GiB") and "!" in vram
    assert "-" + "1.1 GiB free" not in result.stdout


def test_suggest_is_refused_where_it_means_nothing() -> None:
    for stack in ("mi300x", "strix-halo-pair"):
        result = plan(stack, "--suggest")
        assert result.returncode == 2
        assert "--suggest: only a single llama.cpp server has -ngl" in result.stderr


def test_plan_json_follows_the_contract_and_suggests() -> None:
    result = plan("strix-halo", "--json", "--suggest", "--headroom", "4")
    document = json.loads(result.stdout)
    assert document["fits"] is True
    assert set(document["devices"]) == {"vram", "ram", "disk"}
    assert document["devices"]["ram"]["capacity_gib"] == 20
    assert document["suggest"]["gpu_layers"] == 42
    assert document["suggest"]["context_size"] >= 65536


def test_plan_reads_gguf_headers_at_hand(tmp_path: Path) -> None:
    from tests.support.tiny_gguf import write_tiny_split_model

    shards = write_tiny_split_model(tmp_path, "tiny", shards=3)
    document = yaml.safe_load(STACK_FILE.read_text())
    model = document["config"]["llm-infra:model"]
    for key in ("architecture", "layers", "sizeGib", "metadata"):
        del model[key]
    document["config"]["llm-infra:server"]["gpuLayers"] = 3
    bare = tmp_path / "Pulumi.bare.yaml"
    bare.write_text(yaml.safe_dump(document))
    result = plan(str(bare), "--gguf", *map(str, shards))
    assert result.returncode == 0, result.stderr
    assert "weights from: GGUF header" in result.stdout
    # The strix-halo stack names deepseek4's structure: a llama header contradicts it.
    mismatch = plan("strix-halo", "--gguf", *map(str, shards))
    assert mismatch.returncode == 2
    assert "model.architecture: 'deepseek4', but the GGUF header says 'llama'" in mismatch.stderr


def test_render_refuses_a_stack_that_does_not_fit_vram(tmp_path: Path) -> None:
    path = variant(tmp_path, "vramGib: 90", "vramGib: 80")
    out = tmp_path / "out"
    result = render(str(path), out)
    assert result.returncode == 2
    (problem,) = result.stderr.splitlines()[1:]
    assert problem.startswith("plan: does not fit in VRAM: ")
    assert "set server.gpuLayers to at most" in problem
    assert not out.exists()
    assert plan(str(path)).returncode == 1


@pytest.mark.parametrize(
    ("old", "new", "refusal", "fix"),
    [
        ("memory: 20Gi", "memory: 12Gi", "plan: does not fit in the container memory limit",
         "raise server.resources.limits.memory to at least"),
        ("size: 120Gi", "size: 80Gi", "plan: does not fit on the model volume",
         "raise store.size to at least"),
    ],
    ids=["memory-limit-below-the-cpu-side", "volume-too-small-for-the-model"],
)  # fmt: skip
def test_render_refuses_a_memory_limit_or_volume_too_small_naming_the_size_to_raise(
    tmp_path: Path, old: str, new: str, refusal: str, fix: str
) -> None:
    result = render(str(variant(tmp_path, old, new)), tmp_path / "out")
    assert result.returncode == 2
    assert refusal in result.stderr
    assert fix in result.stderr


def test_plan_of_mi300x_counts_hbm_host_ram_and_disk() -> None:
    result = plan("mi300x", "--json")
    document = json.loads(result.stdout)
    assert document["fits"] is True
    hbm = document["devices"]["hbm"]
    assert hbm["items"]["weights"] == 156.67
    assert hbm["capacity_gib"] == 192
    assert document["devices"]["ram"]["items"]["cpu_kv_tier"] == 96


def test_a_shorter_max_model_len_changes_the_mi300x_plan_to_what_it_buys(tmp_path: Path) -> None:
    text = (ROOT / "stacks" / "Pulumi.mi300x.yaml").read_text()
    short = tmp_path / "Pulumi.short.yaml"
    short.write_text(text.replace("maxModelLen: 262144", "maxModelLen: 65536"))
    seed, copy = plan("mi300x"), plan(str(short))
    assert seed.returncode == copy.returncode == 0, seed.stderr + copy.stderr
    assert seed.stdout != copy.stdout
    assert "concurrency: 17.63 requests of 262,144 tokens at once" in seed.stdout
    assert "concurrency: 54.88 requests of 65,536 tokens at once" in copy.stdout
    # One assumption, said once: the KV bytes per token come from vLLM's source.
    for result in (seed, copy):
        (assumed,) = [line for line in result.stdout.splitlines() if "assumed:" in line]
        assert assumed.startswith("assumed: KV bytes per token: DeepSeek-V4-Flash")
    long, shorter = (
        json.loads(plan(p, "-o", "json").stdout)["kv_cache"] for p in ("mi300x", str(short))
    )
    assert (long["max_model_len"], shorter["max_model_len"]) == (262144, 65536)
    # Shorter requests: more of them at once, fewer tokens in all (each keeps its window).
    assert shorter["max_concurrency"] > 3 * long["max_concurrency"]
    assert shorter["gpu_tokens"] < long["gpu_tokens"]
    assert shorter["cpu_tier_tokens"] == long["cpu_tier_tokens"] > long["gpu_tokens"]


def test_render_refuses_a_max_model_len_of_which_one_request_outgrows_the_kv_budget(
    tmp_path: Path,
) -> None:
    text = (ROOT / "stacks" / "Pulumi.mi300x.yaml").read_text()
    path = tmp_path / "Pulumi.long.yaml"
    path.write_text(
        text.replace("maxModelLen: 262144", "maxModelLen: 1048576").replace(
            "kvCacheMemoryBytes: 20000000000", "kvCacheMemoryBytes: 2000000000"
        )
    )
    result = render(str(path), tmp_path / "out")
    assert result.returncode == 2
    assert "plan: one request of 1,048,576 tokens needs 3.9 GiB of KV cache" in result.stderr
    fitting = re.search(r"lower server\.maxModelLen to at most (\d+)", result.stderr)
    assert fitting, result.stderr
    path.write_text(path.read_text().replace("maxModelLen: 1048576", f"maxModelLen: {fitting[1]}"))
    assert render(str(path), tmp_path / "out").returncode == 0


def test_render_refuses_an_mi300x_gpu_kv_cache_that_does_not_fit_hbm(tmp_path: Path) -> None:
    text = (ROOT / "stacks" / "Pulumi.mi300x.yaml").read_text()
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text(
        text.replace("kvCacheMemoryBytes: 20000000000", "kvCacheMemoryBytes: 40000000000")
    )
    result = render(str(path), tmp_path / "out")
    assert result.returncode == 2
    assert "plan: does not fit in HBM" in result.stderr
    assert "lower server.kvCacheMemoryBytes to at most" in result.stderr


def test_seed_probes_outlast_the_estimated_load_with_margin() -> None:
    from components.llamacpp.inputs import LOAD_MARGIN
    from infra.lock import model_source
    from infra.plan.stack import llamacpp_inputs, load_seconds, probe_problems
    from tests.conftest import stack_values, strix

    stack = strix(stack_values("strix-halo"))
    inputs = llamacpp_inputs(stack, model_source(stack.model, ROOT / "none.json", preview=True))
    # 87 GiB at 300 MiB/s plus 60 s of start-up: about 6 minutes.
    assert 340 < load_seconds(stack, inputs) < 370
    assert stack.server.probes.startup.window_seconds >= LOAD_MARGIN * load_seconds(stack, inputs)
    assert probe_problems(stack, inputs) == []


def test_suggest_answers_for_a_stack_whose_context_settings_fail_its_checks(
    tmp_path: Path,
) -> None:
    # Four slots in a context that leaves each below server.minSlotContext: the check refuses
    # it, and --suggest still names sizes that pass it and fit.
    document = yaml.safe_load(STACK_FILE.read_text())
    document["config"]["llm-infra:server"].update(parallel=4, contextSize=197632)
    path = tmp_path / "Pulumi.slots.yaml"
    path.write_text(yaml.safe_dump(document))
    result = plan(str(path), "--suggest")
    assert result.returncode == 2
    assert "server.parallel: 4 slots leave 49408 tokens per slot" in result.stderr
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("suggest (keeping 4 GiB VRAM free): server.gpuLayers: ")
    context = int(line.split("server.contextSize: ")[1].split(",")[0])
    assert context >= 4 * 65536
    document["config"]["llm-infra:server"].update(contextSize=context)
    path.write_text(yaml.safe_dump(document))
    assert plan(str(path)).returncode == 0


def test_suggest_names_min_slot_context_when_the_model_serves_less(tmp_path: Path) -> None:
    document = yaml.safe_load(STACK_FILE.read_text())
    model = document["config"]["llm-infra:model"]
    model["metadata"]["deepseek4.context_length"] = 32768
    path = tmp_path / "Pulumi.short.yaml"
    path.write_text(yaml.safe_dump(document))
    result = plan(str(path), "--suggest")
    assert result.returncode == 2
    assert "more than the model's trained context 32768 (deepseek4.context_length)" in (
        result.stderr
    )
    assert result.stdout.strip() == (
        "suggest: nothing fits: server.minSlotContext 65536 is more than the 32768 tokens a "
        "slot can serve (the model's trained context): lower server.minSlotContext, or extend "
        "the context with YaRN in server.extraArgs"
    )
