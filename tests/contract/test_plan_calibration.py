"""The planner's model-buffer and KV figures match what llama-server b11434 logs, within 2%.

Each case writes a tiny llama model (shape, weight type), reads its GGUF headers with
`components.gguf_header`, plans it with `infra.plan.llamacpp`, then boots the real llama-server with
`-lv 4` and the same `-c`/`-np`/cache types and compares the planned bytes with the
`load_tensors: ... model buffer size` and `llama_kv_cache: size` lines. Run with `-s` to see
the predicted-vs-logged table (compute buffers are printed too; they are an estimate).

Every case runs under the baseline CPU variant (`x64`) and every variant this machine's CPU
supports (`tests.support.llama_build`): the weights llama.cpp repacks for that variant
(`CPU_REPACK`, `AMX`) are predicted per buffer, never skipped. With `-lm none` the weights are
anonymous buffers, so the plan's weights plus its repack buffers must match the log's total;
with the default mmap the repack buffers must match and the mapped buffer lies between the
weights left in it and those plus the repacked ones (llama.cpp maps the file's range from the
first to the last tensor it keeps, repacked tensors in between included).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.cpus import cpu_variant
from infra.plan.deepseek4 import attention_shape, kv_cache_layers
from infra.plan.llamacpp import (
    LlamaCppPlanInputs,
    ModelWeights,
    compute_buffer_bytes,
    cpu_repack,
    placement,
)
from infra.plan.report import MIB
from tests.support import llama_build
from tests.support.calibration_cases import CASES, Case
from tests.support.llama_server import (
    LlamaServerStartError,
    free_port,
    llama_server_binary,
    run_llama_server,
)
from tests.support.tiny_gguf import header_summary, write_tiny_model

TOLERANCE = 0.02
_MODEL = re.compile(r"load_tensors: +(\S+) model buffer size = +([0-9.]+) MiB")
_KV = re.compile(r"llama_kv_cache: size = +([0-9.]+) MiB")
_COMPUTE = re.compile(r"sched_reserve: +(\S+) compute buffer size = +([0-9.]+) MiB")


def _variants() -> list[str]:
    """The baseline and every variant this CPU runs (found at run time, never at collection:
    the fast tier collects this module too)."""
    llama_server_binary()  # builds once; the variants are the build's
    return sorted(set(llama_build.supported_variants()) | {llama_build.BASELINE_VARIANT})


@pytest.fixture(scope="module")
def table() -> Iterator[list[str]]:
    """Rows of the predicted-vs-logged table, printed once the module's cases have run."""
    rows: list[str] = []
    yield rows
    header = (
        f"{'case':<20} {'variant':<15} {'load':<5} {'weights MiB':>19} {'repack MiB':>19} "
        f"{'KV MiB: plan / log':>20}   compute MiB: estimate / log"
    )
    print("\n" + "\n".join([header, *rows]))


def _mib(value: int) -> float:
    return value / MIB


def _logged(log: str) -> tuple[dict[str, float], float, float]:
    model: dict[str, float] = {}
    for m in _MODEL.finditer(log):
        model[m[1]] = model.get(m[1], 0.0) + float(m[2])
    kv = sum(float(m[1]) for m in _KV.finditer(log))
    compute = sum(float(m[2]) for m in _COMPUTE.finditer(log))
    return model, kv, compute


def _within(predicted: float, logged: float) -> bool:
    # The log prints two decimals of MiB per line; allow that rounding on top of 2%.
    return abs(predicted - logged) <= TOLERANCE * logged + 0.01


@pytest.mark.parametrize("load_mode", ["none", "mmap"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planned_model_and_kv_buffers_match_llama_server_log(
    case: Case, load_mode: str, tmp_path: Path, table: list[str]
) -> None:
    shards = write_tiny_model(tmp_path / "m", "cal", 3, case.spec)
    summary = header_summary(shards)
    for variant in _variants():
        _check_variant(case, variant, load_mode, shards, summary, tmp_path, table)


def _check_variant(
    case: Case,
    variant: str,
    load_mode: str,
    shards: list[Path],
    summary: dict[str, Any],
    tmp_path: Path,
    table: list[str],
) -> None:
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary, "GGUF header"),
        attention=attention_shape(
            summary["architecture"], summary["metadata"], summary.get("vocab_size")
        ),
        gpu_layers=0,
        ctx_size=case.ctx,
        parallel=case.parallel,
        cache_type_k=case.cache,
        cache_type_v=case.cache,
        kv_unified=case.unified,
        cpu_variant=cpu_variant(variant),
    )
    kv = kv_cache_layers(
        inputs.attention,
        case.ctx,
        case.parallel,
        case.cache,
        case.cache,
        kv_unified=case.unified,
    )
    place = placement(len(inputs.weights.layer_bytes), 0, has_gpu=False)
    packed = cpu_repack(inputs, place.cpu_layers, output_on_cpu=True)
    kept = _mib(inputs.weights.total_bytes - packed.moved_bytes)
    predicted_repack = {name: _mib(size) for name, size in packed.buffers.items()}
    predicted_kv = _mib(kv.cache_bytes)
    predicted_compute = _mib(compute_buffer_bytes(inputs.attention, case.ctx, inputs.ubatch))

    argv = ["-m", str(shards[0]), "--port", str(free_port()), "--threads", "2", "-lv", "4"]
    argv += ["-c", str(case.ctx), "-np", str(case.parallel), "-ngl", "0", "-lm", load_mode]
    # The buffers are logged at load; no warm-up run, so that b11434's AMX defect (the first
    # quantized tile instruction is undefined, tests/fixtures/cpu_variants/) cannot end a case
    # on a CPU with AMX before its buffers are compared.
    argv += ["--no-warmup"]
    argv += ["--cache-type-k", case.cache, "--cache-type-v", case.cache]
    argv += ["-kvu"] if case.unified else ["-no-kvu"]
    log_path = tmp_path / f"llama-server.{variant}.log"
    try:
        with run_llama_server(argv, timeout=60.0, log_path=log_path, cpu_variant=variant):
            pass
    except LlamaServerStartError as error:
        # The AMX defect the plan refuses (quantized weights in AMX buffers): with -np > 1 the
        # server still dies after its init, by then it has logged every buffer compared here.
        died = "exited with code -4 " in str(error) or "exited with code -11 " in str(error)
        if not (packed.amx_quantized_bytes and died):
            raise
    log = log_path.read_text(errors="replace")
    assert f"libggml-cpu-{variant}.so" in log, f"llama-server did not load the {variant} variant"
    model, kv_logged, compute = _logged(log)
    weights_buffer = "CPU" if load_mode == "none" else "CPU_Mapped"
    assert model.get(weights_buffer, 0) > 0 and kv_logged > 0, (
        f"llama-server logged no {weights_buffer} model buffer or KV cache: {model}"
    )
    logged_repack = {name: size for name, size in model.items() if name != weights_buffer}

    table.append(
        f"{case.name:<20} {variant:<15} {load_mode:<5} {kept:8.2f} / "
        f"{model[weights_buffer]:8.2f} {sum(predicted_repack.values()):8.2f} / "
        f"{sum(logged_repack.values()):8.2f} {predicted_kv:9.2f} / {kv_logged:8.2f}   "
        f"{predicted_compute:8.1f} / {compute:6.1f}"
    )
    assert set(logged_repack) == set(predicted_repack), (
        f"repack buffers: planned {predicted_repack}, logged {logged_repack}"
    )
    for name, size in predicted_repack.items():
        assert _within(size, logged_repack[name]), f"{name} buffer {size:.2f} vs {logged_repack}"
    if load_mode == "none":
        assert _within(kept, model[weights_buffer]), (
            f"model buffer {kept:.2f} vs {model[weights_buffer]:.2f}"
        )
    else:
        moved = _mib(packed.moved_bytes)
        assert kept - 0.01 <= model[weights_buffer] <= (kept + moved) * (1 + TOLERANCE) + 0.01, (
            f"mapped buffer {model[weights_buffer]:.2f} outside {kept:.2f}..{kept + moved:.2f}"
        )
    assert _within(predicted_kv, kv_logged), f"KV cache {predicted_kv:.2f} vs {kv_logged:.2f}"
