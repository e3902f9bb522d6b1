"""The planner's model-buffer and KV figures match what llama-server b11434 logs, within 2%.

Each case writes a tiny llama model (shape, weight type), reads its GGUF headers with
`components.gguf_header`, plans it with `infra.plan.llamacpp`, then boots the real llama-server with
`-lv 4` and the same `-c`/`-np`/cache types and compares the planned bytes with the
`load_tensors: ... model buffer size` and `llama_kv_cache: size` lines. Run with `-s` to see
the predicted-vs-logged table (compute buffers are printed too; they are an estimate).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import pytest

from components.gguf_header import read_gguf_header, summarize
from infra.plan.deepseek4 import attention_shape, kv_cache_layers
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, compute_buffer_bytes
from infra.plan.report import MIB
from tests.support.llama_server import free_port, run_llama_server
from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model

pytestmark = pytest.mark.contract

TOLERANCE = 0.02
_MODEL = re.compile(r"load_tensors: +(\S+) model buffer size = +([0-9.]+) MiB")
_KV = re.compile(r"llama_kv_cache: size = +([0-9.]+) MiB")
_COMPUTE = re.compile(r"sched_reserve: +(\S+) compute buffer size = +([0-9.]+) MiB")
Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Case:
    """One model and server configuration."""

    name: str
    spec: TinyLlamaSpec
    ctx: int
    parallel: int
    cache: str
    unified: bool = False


CASES = [
    Case("f16-c4096-np1-f16", TinyLlamaSpec(4, 256, 4, 4, 512, Q.F16), 4096, 1, "f16"),
    Case("q8-c8192-np2-q8_0", TinyLlamaSpec(4, 256, 4, 4, 512, Q.Q8_0), 8192, 2, "q8_0"),
    Case("f32-c16384-np4-q4_0", TinyLlamaSpec(3, 256, 4, 2, 512, Q.F32), 16384, 4, "q4_0"),
    Case("gqa-c3000-np3-f16", TinyLlamaSpec(5, 256, 8, 2, 384, Q.F16), 3000, 3, "f16"),
    Case("kvu-c6000-np2-q8_0", TinyLlamaSpec(2, 128, 4, 4, 256, Q.F16), 6000, 2, "q8_0", True),
]


@pytest.fixture(scope="module")
def table() -> Iterator[list[str]]:
    """Rows of the predicted-vs-logged table, printed once the module's cases have run."""
    rows: list[str] = []
    yield rows
    header = f"{'case':<22} {'model MiB: plan / log':>26} {'KV MiB: plan / log':>24}"
    print("\n" + "\n".join([header + "   compute MiB: estimate / log", *rows]))


def _mib(value: int) -> float:
    return value / MIB


def _logged(log: str) -> tuple[float, float, float]:
    model = sum(float(m[2]) for m in _MODEL.finditer(log))
    kv = sum(float(m[1]) for m in _KV.finditer(log))
    compute = sum(float(m[2]) for m in _COMPUTE.finditer(log))
    return model, kv, compute


def _within(predicted: float, logged: float) -> bool:
    # The log prints two decimals of MiB per line; allow that rounding on top of 2%.
    return abs(predicted - logged) <= TOLERANCE * logged + 0.01


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planned_model_and_kv_buffers_match_llama_server_log(
    case: Case, tmp_path: Path, table: list[str]
) -> None:
    shards = write_tiny_model(tmp_path / "m", "cal", 3, case.spec)
    headers = []
    for shard in shards:
        with shard.open("rb") as stream:
            headers.append(read_gguf_header(stream))
    summary = summarize(headers)
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
    )
    kv = kv_cache_layers(
        inputs.attention,
        case.ctx,
        case.parallel,
        case.cache,
        case.cache,
        kv_unified=case.unified,
    )
    predicted_model = _mib(inputs.weights.total_bytes)
    predicted_kv = _mib(kv.cache_bytes)
    predicted_compute = _mib(compute_buffer_bytes(inputs.attention, case.ctx, inputs.ubatch))

    argv = ["-m", str(shards[0]), "--port", str(free_port()), "--threads", "2", "-lv", "4"]
    argv += ["-c", str(case.ctx), "-np", str(case.parallel), "-ngl", "0"]
    argv += ["--cache-type-k", case.cache, "--cache-type-v", case.cache]
    argv += ["-kvu"] if case.unified else ["-no-kvu"]
    log_path = tmp_path / "llama-server.log"
    with run_llama_server(argv, timeout=60.0, log_path=log_path):
        pass
    model, kv_logged, compute = _logged(log_path.read_text(errors="replace"))
    assert model > 0 and kv_logged > 0, "llama-server logged no model or KV buffer sizes"

    table.append(
        f"{case.name:<22} {predicted_model:15.2f} / {model:8.2f} {predicted_kv:13.2f} / "
        f"{kv_logged:8.2f}   {predicted_compute:14.1f} / {compute:6.1f}"
    )
    assert _within(predicted_model, model), f"model buffer {predicted_model:.2f} vs {model:.2f}"
    assert _within(predicted_kv, kv_logged), f"KV cache {predicted_kv:.2f} vs {kv_logged:.2f}"
