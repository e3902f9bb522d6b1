"""The plan's speed estimate against llama-server's own recorded decode and prefill.

The recorded runs: `bench.speed_measure`'s generated dense and MoE models through the Vulkan
build on H100 machines (tests/fixtures/speed/vulkan*.json) and through the CPU build
(tests/fixtures/speed/cpu.json), the H100's Vulkan bake-off (tests/fixtures/tune/h100/) and the
H200's figures (tests/fixtures/gpu_gate/h200-run.txt). Each backend's declared efficiency must be
what its calibration runs give, and the estimate must hold on the others, missing only the
figures named here (docs/memory-plan.md says why).
"""

from __future__ import annotations

import json
import math
import pathlib
from subprocess import CompletedProcess

import pytest

from bench.speed_estimate import (
    GPU_RECORD,
    OTHER_GPU_RECORDS,
    Point,
    cpu_points,
    each_shape_left_out,
    estimated,
    fit_cpu,
    fit_vulkan,
    gpu_points,
    machine_ratios,
    other_machine_points,
    plan_inputs,
    shape_of_point,
    table,
)
from bench.speed_shapes import (
    CALIBRATION,
    GPU_CALIBRATION,
    GPU_CHECKS,
    GPU_NEXT,
    GPU_SHAPES,
    SHAPES,
    write_shape,
)
from components.gguf_header import read_gguf_header, summarize
from components.payloads.tune_figures import (
    MAX_TOKENS_PER_S,
    CandidateResult,
    DecodeCeiling,
    figures_problem,
)
from components.payloads.tune_measure import DepthFigures, Series
from infra.devices import DEVICES, decode_ceiling, device_figures
from infra.plan.speed_calibrations import CALIBRATIONS, Calibration
from tests.conftest import stack_document, write_stack
from tests.support.cli import llm_infra
from tests.support.stack_edits import DELETE, Edit, edited


def test_vulkan_efficiency_is_what_the_h100_calibration_runs_give() -> None:
    assert fit_vulkan(gpu_points()) == CALIBRATIONS["vulkan"]


Figure = tuple[str, str, int]
"""A run's label (`SHAPE -ngl N`), the figure (`decode`, `prefill`) and the depth."""


def missed_figures(points: list[Point], calibration: Calibration | None = None) -> set[Figure]:
    calibration = calibration or CALIBRATIONS["vulkan"]
    assert calibration is not None
    _, missed = table(points, calibration)
    return {(p.label, p.kind, p.depth) for p in missed}


def test_each_gpu_calibration_shape_is_estimated_by_a_calibration_that_never_saw_it() -> None:
    """Six shapes of GiBs (dense and MoE, F16 and Q8_0, every layer and half on the GPU, depths
    0 and 16384), each estimated by the calibration the other five give: 46 of the 48 figures
    within 25 % (or, where its own runs spread wider, within their range), the other two
    prefill with half the layers on the host, 26 % and 29 % below."""
    left_out = each_shape_left_out(gpu_points())
    assert {shape_of_point(p) for p, _ in left_out} == set(GPU_CALIBRATION)
    assert len(left_out) == len(GPU_CALIBRATION) * 2 * 2 * 2
    assert any(GPU_SHAPES[s].n_expert for s in GPU_CALIBRATION)
    assert any(GPU_SHAPES[s].weight_type == "Q8_0" for s in GPU_CALIBRATION)
    missed: set[Figure] = set()
    for point, calibration in left_out:
        assert calibration != CALIBRATIONS["vulkan"]  # fitted without the point's shape
        missed |= missed_figures([point], calibration)
    assert missed == {
        ("dense-32x2048 -ngl 16", "prefill", 16384), ("moe-12x2048 -ngl 6", "prefill", 0)
    }  # fmt: skip


def test_the_shapes_declared_before_their_run_hold_but_one_host_half() -> None:
    """`GPU_CHECKS` (declared before any run of them) and the two shapes of 1.6 GiB layers, run
    on the calibration's machine in the same call: 36 of their 40 figures hold. moe-32x1024's
    with half its layers on the host miss (decode 25-32 % faster than estimated: 16 thin layers
    of 64 experts, whose fixed costs on the host the six shapes do not pin), and dense-8x8192's
    prefill at depth 0, 26 % faster (a layer of 1.6 GiB runs its products nearer the peak)."""
    checks = [p for p in gpu_points() if not p.calibration]
    assert {shape_of_point(p) for p in checks} == {*GPU_CHECKS, "dense-8x8192", "moe-8x4096"}
    assert len(checks) == 4 * 8 + 2 * 4
    assert missed_figures(checks) == {
        ("moe-32x1024 -ngl 16", "decode", 0),
        ("moe-32x1024 -ngl 16", "decode", 16384),
        ("moe-32x1024 -ngl 16", "prefill", 0),
        ("dense-8x8192 -ngl 9", "prefill", 0),
    }


def test_the_previous_calibration_runs_from_another_machine_hold_with_one_miss() -> None:
    """The six calibration shapes as run on machines of the same kind on other days (the
    previous calibration's runs): 47 of 48 figures within 25 %."""
    earlier = [p for p in other_machine_points()["earlier"]
               if shape_of_point(p) in GPU_CALIBRATION]  # fmt: skip
    assert len(earlier) == 48 and not any(p.calibration for p in earlier)
    assert missed_figures(earlier) == {("moe-16x1024 -ngl 8", "decode", 16384)}


def test_slower_machines_of_the_kind_are_slower_than_the_estimate_not_faster() -> None:
    """Two other calls' machines (`other-a`, `other-b`) ran the shapes slower: the calibration
    shape that `other-b` ran again decoded at 0.86-0.90 of the calibration machine's speed with
    every layer on the GPU and 0.74 with half on the host. Every figure the estimate misses there
    it puts too high."""
    others = other_machine_points()
    ratios = {(here.label, here.kind, here.depth): ratio
              for here, _, ratio in machine_ratios(gpu_points(), others["other-b"])}  # fmt: skip
    assert 0.85 <= ratios[("dense-28x1536 -ngl 29", "decode", 0)] <= 0.90
    assert 0.85 <= ratios[("dense-28x1536 -ngl 29", "decode", 16384)] <= 0.91
    assert 0.72 <= ratios[("dense-28x1536 -ngl 14", "decode", 0)] <= 0.76
    calibration = CALIBRATIONS["vulkan"]
    assert calibration is not None
    for name in ("other-a", "other-b"):
        _, missed = table(others[name], calibration)
        assert missed and all(estimated(p, calibration) > p.measured for p in missed), name


def test_vulkan_estimate_on_the_43_layer_llama_and_the_h200() -> None:
    """The bake-off's llama (14 MiB layers, q8_0 KV cache; 3 and 23 of its layers on the host at
    -ngl 40 and 20) and the H200's rendered-argv run: decode within 25 % everywhere but `-ngl 99`
    at depth 0 (39 % too fast: 43 layers this thin cost more each than the shapes of GiBs
    show), and the H200's figures within 25 %. Prefill at depth 0 misses (its 512-token prompts
    are one step each)."""
    points = other_machine_points()["llama43"]
    assert {p.label for p in points} == {
        "H100 -ngl 40", "H100 -ngl 20", "H100 -ngl 99", "H200 -ngl 40"
    }  # fmt: skip
    missed = missed_figures(points)
    assert {f for f in missed if f[1] == "decode"} == {("H100 -ngl 99", "decode", 0)}
    assert not {f for f in missed if f[0].startswith("H200")}
    assert {f for f in missed if f[1] == "prefill"} == {
        ("H100 -ngl 40", "prefill", 0), ("H100 -ngl 99", "prefill", 0),
        ("H100 -ngl 20", "prefill", 0),
    }  # fmt: skip


def test_every_layer_on_the_gpu_mostly_holds_on_the_small_shapes_their_host_halves_do_not() -> None:
    """The CPU runs' five small shapes on the GPU (another machine of the kind): with every
    layer there, each figure within 25 % (or its runs' range) but four at depth 0: two decodes
    28 % and 30 % too fast, two prefills 40 % and 44 % too slow (layers of 2-12 MiB, bound by
    launches and synchronisation, not by the terms of a GiB-sized model); with half on the
    host, the host's layers (tens of MiB, held in the Xeon's cache) decode faster than a reading
    of memory, which the estimate is not for."""
    calibration = CALIBRATIONS["vulkan"]
    assert calibration is not None
    small = [p for p in other_machine_points()["earlier"] if shape_of_point(p) in SHAPES]
    assert {shape_of_point(p) for p in small} == set(SHAPES)
    on_gpu = [p for p in small if not p.inputs.on_host.layers]
    assert len(on_gpu) == len(SHAPES) * 2 * 2
    assert missed_figures(on_gpu) == {
        ("dense-8x1024 -ngl 9", "decode", 0), ("dense-16x768-q8 -ngl 17", "decode", 0),
        ("dense-8x1024 -ngl 9", "prefill", 0), ("moe-12x512 -ngl 13", "prefill", 0),
    }  # fmt: skip
    _, host_missed = table([p for p in small if p.inputs.on_host.layers], calibration)
    assert host_missed
    assert all(estimated(p, calibration) < p.measured for p in host_missed if p.kind == "decode")


def test_cpu_efficiency_is_what_its_calibration_shapes_give() -> None:
    assert fit_cpu(cpu_points()) == CALIBRATIONS["cpu"]


def test_cpu_estimate_holds_on_shapes_it_was_not_calibrated_on() -> None:
    """Every figure of the dense check shape, and each MoE's decode at depth; the MoE figures
    it misses on these generated models (docs/memory-plan.md says why) are left out by name."""
    points = cpu_points()
    checks = [p for p in points if not p.calibration]
    shapes = {p.label for p in checks}
    assert shapes == set(SHAPES) - set(CALIBRATION)
    assert any(SHAPES[s].n_expert for s in shapes) and any(not SHAPES[s].n_expert for s in shapes)
    assert {p.depth for p in checks} == {0, 4096}
    calibration = CALIBRATIONS["cpu"]
    assert calibration is not None
    text, missed = table(points, calibration)
    held = [
        p for p in checks if not SHAPES[p.label].n_expert or (p.kind, p.depth) == ("decode", 4096)
    ]
    assert len(held) == 6
    assert not [p for p in missed if p in held], text


def test_a_mixture_of_experts_reads_only_its_active_experts(tmp_path: pathlib.Path) -> None:
    path = write_shape(tmp_path, "moe-6x1024")
    with path.open("rb") as handle:
        summary = summarize([read_gguf_header(handle)])
    shape = SHAPES["moe-6x1024"]
    inputs = plan_inputs(summary, 0, 8192, "f16", gpu=False, device="epyc-7003", threads=1)
    experts = 3 * shape.n_embd * shape.n_ff * shape.n_expert * 2 * shape.n_layer  # F16
    idle = experts * (1 - shape.n_expert_used / shape.n_expert)
    read = inputs.on_device.weight_bytes
    token_embd = summary["other_tensors"]["token_embd.weight"]
    assert read == pytest.approx(summary["total_bytes"] - token_embd - idle)
    # F16 matrices: 2 bytes an active parameter (norms and the F32 router are a rounding).
    assert inputs.on_device.params * 2 == pytest.approx(read, rel=0.01)


def test_the_ceiling_is_bandwidth_over_bytes_per_token() -> None:
    device, host = device_figures("radeon-8060s")
    assert device.bandwidth_gbps == 256 and device.shared_with_host
    assert host is not None and host.bandwidth_gbps == 256
    assert decode_ceiling(device.bandwidth_gbps, 2.56e9) == pytest.approx(100.0)
    # A unified memory: overriding the bandwidth overrides the host's too.
    device, host = device_figures("radeon-8060s", bandwidth_gbps=200)
    assert host is not None and host.bandwidth_gbps == 200
    device, host = device_figures("h100-sxm", bandwidth_gbps=3000)
    assert host == DEVICES["xeon-4th-gen"]


def _result(decode: float) -> CandidateResult:
    result = CandidateResult("vulkan", {"name": "vulkan"}, current=True)
    result.depths.append(DepthFigures(depth=0, decode_server=Series([decode] * 3)))
    return result


def test_the_bake_off_refuses_a_decode_above_the_devices_ceiling() -> None:
    ceiling = DecodeCeiling(90.0, "256 GB/s of the Radeon 8060S / 2.64 GiB a token")
    problem = figures_problem(_result(120.0), ceiling)
    assert problem is not None
    assert "120.0 tok/s" in problem and "90.0 tok/s" in problem
    assert f"{MAX_TOKENS_PER_S:,.0f}" in problem
    assert figures_problem(_result(80.0), ceiling) is None
    # Without a device the fixed ceiling stays.
    assert figures_problem(_result(120.0)) is None
    assert figures_problem(_result(2 * MAX_TOKENS_PER_S)) is not None


def test_the_recorded_cpu_runs_name_their_machine() -> None:
    record = json.loads(
        (pathlib.Path(__file__).parents[1] / "fixtures" / "speed" / "cpu.json").read_text()
    )
    assert "EPYC" in record["cpu"] and record["threads"] >= 1
    for model in record["models"]:
        for fig in model["figures"]:
            assert not fig["errors"]
            assert all(math.isfinite(v) for v in fig["decodeTokSServer"]["runs"])


def _plan(tmp_path: pathlib.Path, edits: list[Edit], *args: str) -> CompletedProcess[str]:
    path = write_stack(tmp_path / "Pulumi.strix-halo.yaml", edited("strix-halo", edits))
    return llm_infra("plan", str(path), *args)


def test_plan_prints_the_estimate_with_its_inputs_for_a_stack_naming_its_device(
    tmp_path: pathlib.Path,
) -> None:
    # The expert count (not in the unlocked stack): 6 of 256 experts' bytes a token.
    metadata = stack_document("strix-halo")["config"]["llm-infra:model"]["metadata"]
    edits: list[Edit] = [("model", "metadata", {**metadata, "deepseek4.expert_count": 256})]
    shown = _plan(tmp_path, edits)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "speed (estimate, AMD Radeon 8060S" in text
    assert "vulkan: calibrated on H100 (one machine, one call): dense-32x2048" in text
    assert "tok/s at depth 0" in text and "tok/s at 65,536 tokens" in text
    assert (
        "input: device AMD Radeon 8060S (Ryzen AI Max+ 395, LPDDR5X-8000 unified): 256 GB/s" in text
    )
    document = json.loads(_plan(tmp_path, edits, "-o", "json").stdout)
    speed = document["speed"]
    assert speed["estimate"] is True and speed["slot_context"] == 65536
    assert speed["decode_full_context_tok_s"] < speed["decode_tok_s"] < speed["ceiling_tok_s"]
    # 6/256 of 87 GiB a token at 256 GB/s: the ceiling is near 117 tok/s.
    assert speed["ceiling_tok_s"] == pytest.approx(256e9 / (87 * 2**30 * 6 / 256), rel=0.02)
    # Without memory.device there is no estimate, and nothing else of the plan changes.
    bare = json.loads(_plan(tmp_path, [*edits, ("memory", "device", DELETE)], "-o", "json").stdout)
    assert "speed" not in bare
    assert bare == {k: v for k, v in document.items() if k != "speed"}


def test_an_unknown_device_is_refused_with_the_table(tmp_path: pathlib.Path) -> None:
    shown = _plan(tmp_path, [("memory", "device.name", "radeon-9999")])
    assert shown.returncode == 2
    assert "memory.device.name: 'radeon-9999' not in the plan's device table (one of: " in (
        shown.stderr
    )
    assert "radeon-8060s, ryzen-ai-max-395, mi300x" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_tune_takes_the_ceiling_of_the_stacks_device(tmp_path: pathlib.Path) -> None:
    from infra.cli.tune import device_ceiling
    from infra.config import read_stack_file

    metadata = stack_document("strix-halo")["config"]["llm-infra:model"]["metadata"]
    counted = [("model", "metadata", {**metadata, "deepseek4.expert_count": 256})]
    path = write_stack(tmp_path / "Pulumi.strix-halo.yaml", edited("strix-halo", counted))
    ceiling = device_ceiling(read_stack_file(path), None)
    assert ceiling is not None
    assert ceiling.tok_s == pytest.approx(256e9 / (87 * 2**30 * 6 / 256), rel=0.02)
    assert "256 GB/s of AMD Radeon 8060S" in ceiling.what
    # Every expert's bytes counted (no expert count) is a floor on the speed, never a ceiling;
    # and a stack without a device keeps the fixed ceiling.
    path = write_stack(tmp_path / "Pulumi.strix-halo.yaml", edited("strix-halo", []))
    assert device_ceiling(read_stack_file(path), None) is None
    bare = [("memory", "device", DELETE), *counted]
    path = write_stack(tmp_path / "Pulumi.strix-halo.yaml", edited("strix-halo", bare))
    assert device_ceiling(read_stack_file(path), None) is None


def test_the_docs_table_of_the_gpu_shapes_is_what_the_runs_and_the_estimate_give() -> None:
    """docs/memory-plan.md's table of the Vulkan runs of generated shapes (measured / estimated,
    error) is what `bench.speed_estimate` computes from tests/fixtures/speed/vulkan.json."""
    calibration = CALIBRATIONS["vulkan"]
    assert calibration is not None
    rows: dict[str, list[str]] = {}
    for p in gpu_points():
        est = estimated(p, calibration)
        rows.setdefault(p.label, []).append(
            f"{p.measured:,.0f} / {est:,.0f} ({est / p.measured - 1:+.0%})"
        )
    text = (pathlib.Path(__file__).parents[2] / "docs" / "memory-plan.md").read_text()
    for label, cells in rows.items():
        # decode @0, decode @16384, prefill @0, prefill @16384: the record's order per depth.
        ordered = [cells[0], cells[2], cells[1], cells[3]]
        assert f"| {label} | " + " | ".join(ordered) + " |" in text, label


def test_declared_check_shapes_run_only_in_the_calibrations_call_and_the_next_not_yet() -> None:
    runs = {
        name: {model["shape"] for model in json.loads(path.read_text())["models"]}
        for name, path in {"here": GPU_RECORD, **OTHER_GPU_RECORDS}.items()
    }
    assert set(GPU_CHECKS) <= set(GPU_SHAPES) and set(GPU_CHECKS) <= runs["here"]
    assert set(GPU_CALIBRATION) <= runs["here"] and not set(GPU_CHECKS) & set(GPU_CALIBRATION)
    assert not any(set(GPU_CHECKS) & runs[name] for name in OTHER_GPU_RECORDS)
    assert set(GPU_NEXT) <= set(GPU_SHAPES)
    assert not any(set(GPU_NEXT) & shapes for shapes in runs.values())
