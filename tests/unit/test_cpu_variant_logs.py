"""The plan's AMX buffers against llama-server b11434's own load logs on a CPU with AMX.

The logs (tests/fixtures/cpu_variants/, README there) come from the seeded calibration models of
tests/support/calibration_cases.py under the build's `sapphirerapids` variant; this machine need
not have AMX to hold the plan to them.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from infra.plan.deepseek4 import attention_shape
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, cpu_repack, placement
from infra.plan.report import MIB
from tests.support.calibration_cases import CASES, Case
from tests.support.tiny_gguf import header_summary, write_tiny_model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cpu_variants" / "xeon-amx-b11434.tar.gz"
_MODEL = re.compile(r"load_tensors: +(\S+) model buffer size = +([0-9.]+) MiB")
# Quantized weights in AMX: b11434 dies in the warm-up run (SIGILL at the first tile instruction).
CRASHES = {"q8-c8192-np2-q8_0", "q4-c4096-np2-f16"}


def _log(name: str) -> str:
    with tarfile.open(FIXTURE) as archive:
        member = archive.extractfile(name)
        assert member is not None, name
        return member.read().decode()


def _buffers(log: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for m in _MODEL.finditer(log):
        found[m[1]] = found.get(m[1], 0.0) + float(m[2])
    return found


def _inputs(case: Case, tmp_path: Path, repack: bool = True) -> LlamaCppPlanInputs:
    shards = write_tiny_model(tmp_path / "m", "cal", 3, case.spec)
    summary = header_summary(shards)
    return LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary, "GGUF header"),
        attention=attention_shape(summary["architecture"], summary["metadata"], None),
        gpu_layers=0,
        ctx_size=case.ctx,
        parallel=case.parallel,
        cpu_variant="sapphirerapids",
        repack=repack,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planned_amx_buffers_match_a_xeon_load_log(case: Case, tmp_path: Path) -> None:
    inputs = _inputs(case, tmp_path)
    n_layer = len(inputs.weights.layer_bytes)
    packed = cpu_repack(inputs, placement(n_layer, 0, has_gpu=False).cpu_layers, True)
    logged = _buffers(_log(f"{case.name}-none.sapphirerapids.log"))
    planned = {name: size / MIB for name, size in packed.buffers.items()}
    kept = (inputs.weights.total_bytes - packed.moved_bytes) / MIB
    assert set(logged) == {"CPU", *planned}, (logged, planned)
    for name, size in planned.items():
        assert abs(size - logged[name]) <= 0.02 * logged[name] + 0.01, (name, size, logged)
    assert abs(kept - logged["CPU"]) <= 0.02 * logged["CPU"] + 0.01, (kept, logged)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_quantized_weights_in_amx_end_b11434_in_its_warm_up(case: Case) -> None:
    log = _log(f"{case.name}-none.sapphirerapids.log")
    warmed = "warming up the model" in log and "llama_server: listening on" in log
    assert warmed == (case.name not in CRASHES), log[-400:]


def test_no_repack_serves_from_plain_cpu_buffers_on_the_same_cpu(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "q8-c8192-np2-q8_0")
    log = _log(f"{case.name}-none-norepack.sapphirerapids.log")
    assert "llama_server: listening on" in log
    inputs = _inputs(case, tmp_path, repack=False)
    assert _buffers(log) == {"CPU": pytest.approx(inputs.weights.total_bytes / MIB, abs=0.01)}
