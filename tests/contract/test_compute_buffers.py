"""llama-server b11434's CPU compute buffer: the F16 KQ mask plus activations (bench script).

`bench/compute_buffers.py` starts the real CPU build at `-ngl 0 -fa on` for model shapes,
contexts and ubatches, and prints what the load log reserves beside the planner's estimate.
Held here: the buffer grows with the context by exactly the F16 mask (2 x ctx x ubatch bytes),
so the rest depends on the shape and ubatch only; and the planner's figure never falls below
what llama-server reserved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import compute_buffers as compute


def test_the_cpu_compute_buffer_is_the_mask_plus_activations(tmp_path: Path) -> None:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for n_embd, n_ff in [(1024, 256), (1024, 4096)]:
        model = compute.write_model(tmp_path / f"e{n_embd}-ff{n_ff}", n_embd, n_ff)
        for ctx in (4096, 16384):
            for ubatch in (128, 512):
                key = (n_embd, n_ff, ctx, ubatch, 0, "f16")
                buffers = compute.compute_buffers(model, key, tmp_path / compute.log_name(key))
                assert list(buffers) == ["CPU"]
                rows[key] = compute.row(key, "CPU", buffers["CPU"])
    print("\n" + compute.format_table(list(rows.items())))
    for (n_embd, n_ff, ctx, ubatch, ngl, cache), figures in rows.items():
        assert figures["plan"] >= figures["measured"], figures
        if ctx == 16384:
            grown = figures["measured"] - rows[(n_embd, n_ff, 4096, ubatch, ngl, cache)]["measured"]
            # Two decimals of MiB in each log line.
            assert abs(grown - 2 * (16384 - 4096) * ubatch / compute.MIB) <= 0.011, figures
    # The activations grow with n_ff: the model's shape shows in the rest, not only the mask.
    wide, narrow = rows[(1024, 4096, 4096, 512, 0, "f16")], rows[(1024, 256, 4096, 512, 0, "f16")]
    assert wide["floats_per_token"] > narrow["floats_per_token"]
    # The logs a run kept read back to the same table (how a GPU machine's logs are read).
    assert sorted(compute.from_logs(tmp_path)) == sorted(rows.items())


def test_with_several_slots_the_compute_buffer_follows_the_per_slot_context(
    tmp_path: Path,
) -> None:
    # -c 16384 -np 2: each slot's graph attends over 8192 cells, so the buffer is the one of
    # -c 8192 -np 1, and the planner (which places and sizes by the per-slot cells) agrees.
    from dataclasses import replace

    from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, plan_llamacpp
    from tests.support.llama_server import free_port, run_llama_server

    model = compute.write_model(tmp_path / "e1024-ff1024", 1024, 1024)

    def cpu_buffer(ctx: int, parallel: int) -> float:
        log = tmp_path / f"c{ctx}-np{parallel}.load.log"
        argv = [
            "-m", str(model), "--port", str(free_port()), "--threads", "2", "-c", str(ctx),
            "-ub", "512", "-b", "2048", "-np", str(parallel), "-ngl", "0", "-fa", "on",
            "-lv", "4", "--log-file", str(log),
        ]  # fmt: skip
        with run_llama_server(argv, log_path=log.with_suffix(".console")):
            pass
        buffers = compute.read_log(log)
        assert list(buffers) == ["CPU"]
        return float(buffers["CPU"])

    two_slots, one_slot = cpu_buffer(16384, 2), cpu_buffer(8192, 1)
    assert two_slots == pytest.approx(one_slot, abs=0.011)
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights.from_file_sizes(model.stat().st_size, 2),
        attention=compute.shape_of(1024, 1024),
        gpu_layers=0,
        ctx_size=16384,
        parallel=2,
    )
    planned = plan_llamacpp(inputs).devices["ram"].items["compute"] / compute.MIB
    alone = plan_llamacpp(replace(inputs, ctx_size=8192, parallel=1)).devices["ram"]
    assert planned == pytest.approx(alone.items["compute"] / compute.MIB)
    assert two_slots <= planned
