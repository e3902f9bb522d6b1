"""Tensor overrides in the plan match where llama-server b11434 really puts the tensors.

A real rpc-server on loopback stands in for the GPU (the head offloads every layer to it, as to a
Vulkan device); the real llama-server loads a tiny model with `--n-cpu-moe`, `--cpu-moe`,
`--n-cpu-ffn` or `-ot PATTERN=CPU`, and the model buffers it logs per device (the RPC device's,
the CPU's; `components.payloads.gpu_gate.parse_load_log`) are the plan's `vram:<worker>` and
`ram` weights for the same words, within 2%: the plan reads the words with
`infra.plan.extra_args` (as a stack's plan does) from the GGUF summary of the model's header.
`-lm none` keeps the CPU's weights in one anonymous buffer; the baseline CPU variant repacks
nothing, so no repack buffer enters the comparison. Run with `-s` for the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest

from components.gguf_header import read_gguf_header, summarize
from components.payloads.gpu_gate import parse_load_log
from infra.plan.deepseek4 import attention_shape
from infra.plan.extra_args import extra_args_problems, with_extra_args
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, RpcDevice, plan_llamacpp
from infra.plan.report import GIB, MIB
from tests.support import llama_build
from tests.support.llama_server import free_port, run_llama_server
from tests.support.rpc_server import rpc_build, run_rpc_server
from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model

TOLERANCE = 0.02
WORKER = "gpu"


def deepseek4_moe() -> Path:
    """llama.cpp's tiny deepseek4 MoE model (`test-llama-archs`, written by the build)."""
    return llama_build.build_root() / "models" / "deepseek4-moe.gguf"


def dense_llama(directory: Path) -> Path:
    spec = TinyLlamaSpec(4, 256, 4, 4, 512, gguf.GGMLQuantizationType.Q8_0)
    (path,) = write_tiny_model(directory, "dense", 1, spec)
    return path


CASES: list[tuple[str, str, list[str]]] = [
    ("moe-none", "moe", []),
    ("moe-n-cpu-moe-2", "moe", ["--n-cpu-moe", "2"]),
    ("moe-cpu-moe", "moe", ["--cpu-moe"]),
    ("moe-ot-up-down", "moe", ["-ot", r"blk\.[13]\.ffn_(up|down)_exps=CPU"]),
    ("dense-n-cpu-ffn-2", "dense", ["--n-cpu-ffn", "2"]),
    ("dense-ot-attn-output", "dense", ["-ot", r"blk\.(0|3)\.attn_(q|k)=CPU,^output\.=CPU"]),
]


@pytest.fixture(scope="module")
def table() -> Any:
    rows: list[str] = []
    yield rows
    print("\n" + "\n".join([f"{'case':<22} {'RPC MiB plan / log':>22} {'CPU MiB plan / log':>22}",
                            *rows]))  # fmt: skip


def _within(planned: float, logged: float) -> bool:
    # The log prints two decimals of MiB per buffer; allow that rounding on top of 2%.
    return abs(planned - logged) <= TOLERANCE * logged + 0.01


@pytest.mark.parametrize(("name", "model", "words"), CASES, ids=[c[0] for c in CASES])
def test_the_planned_weights_per_device_match_llama_servers_buffers(
    name: str, model: str, words: list[str], tmp_path: Path, table: list[str]
) -> None:
    path = deepseek4_moe() if model == "moe" else dense_llama(tmp_path)
    with path.open("rb") as stream:
        summary = summarize([read_gguf_header(stream)])
    assert extra_args_problems(words, summary) == []
    n_layer = len(summary["layer_bytes"])
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary, "GGUF header"),
        attention=attention_shape(
            summary["architecture"], summary["metadata"], summary.get("vocab_size")
        ),
        gpu_layers=n_layer + 1,
        ctx_size=4096,
        rpc_devices=(RpcDevice(WORKER, 8 * GIB),),
        cpu_variant=llama_build.BASELINE_VARIANT,  # type: ignore[arg-type]
    )
    plan = plan_llamacpp(with_extra_args(inputs, words, summary))
    planned_gpu = plan.devices[f"vram:{WORKER}"].items["weights"] / MIB
    ram = plan.devices["ram"].items
    assert ram["repacked_weights"] == 0
    planned_cpu = ram["weights"] / MIB

    log = tmp_path / "llama-server.log"
    argv = ["-m", str(path), "--port", str(free_port()), "--threads", "2", "-lv", "4"]
    argv += ["-c", "4096", "-np", "1", "-ngl", str(n_layer + 1), "-lm", "none", "--no-warmup"]
    rpc_server = rpc_build() / "ggml-rpc-server"
    with run_rpc_server(rpc_server, free_port(), tmp_path / "rpc.log") as endpoint:
        argv += ["--rpc", endpoint, *words]
        with run_llama_server(argv, timeout=120.0, log_path=log):
            pass
    evidence = parse_load_log(log.read_text(errors="replace"))
    logged_gpu = sum(evidence.gpu_buffers_mib.values())
    logged_cpu = sum(evidence.host_buffers_mib.values())
    table.append(
        f"{name:<22} {planned_gpu:10.2f} / {logged_gpu:9.2f} {planned_cpu:10.2f} / "
        f"{logged_cpu:9.2f}"
    )
    assert list(evidence.gpu_buffers_mib) and all(
        b.startswith("RPC0[") for b in evidence.gpu_buffers_mib
    ), evidence.gpu_buffers_mib
    assert _within(planned_gpu, logged_gpu), (planned_gpu, logged_gpu)
    assert _within(planned_cpu, logged_cpu), (planned_cpu, logged_cpu)
    if words:
        # The words moved something: the case is not the baseline again.
        baseline = plan_llamacpp(inputs).devices[f"vram:{WORKER}"].items["weights"] / MIB
        assert planned_gpu < baseline - 0.1
