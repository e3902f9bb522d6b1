"""llama-server b11434's CPU compute buffer: the F16 KQ mask plus activations (bench script).

`bench/compute_buffers.py` starts the real CPU build at `-ngl 0 -fa on` for model shapes,
contexts and ubatches, and prints what the load log reserves beside the planner's estimate.
Held here: the buffer grows with the context by exactly the F16 mask (2 x ctx x ubatch bytes),
so the rest depends on the shape and ubatch only; and the planner's figure never falls below
what llama-server reserved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.modules import load_file

pytestmark = pytest.mark.contract

bench = load_file("bench_compute_buffers", ROOT / "bench" / "compute_buffers.py")


def test_the_cpu_compute_buffer_is_the_mask_plus_activations(tmp_path: Path) -> None:
    shapes = [(1024, 256), (1024, 4096)]
    rows: dict[tuple[int, int, int, int], dict[str, float]] = {}
    for i, (n_embd, n_ff) in enumerate(shapes):
        model = bench.write_model(tmp_path / f"m{i}", n_embd, n_ff)
        for ctx in (4096, 16384):
            for ubatch in (128, 512):
                log = tmp_path / f"m{i}-{ctx}-{ubatch}.log"
                measured = bench.cpu_compute_mib(model, ctx, ubatch, log)
                rows[(n_embd, n_ff, ctx, ubatch)] = bench.row(n_embd, n_ff, ctx, ubatch, measured)
    print("\n" + bench.format_table(list(rows.items())))
    for (n_embd, n_ff, ctx, ubatch), figures in rows.items():
        assert figures["plan"] >= figures["measured"], (n_embd, n_ff, ctx, ubatch, figures)
        if ctx == 16384:
            small = rows[(n_embd, n_ff, 4096, ubatch)]
            grown = figures["measured"] - small["measured"]
            # Two decimals of MiB in each log line.
            assert abs(grown - 2 * (16384 - 4096) * ubatch / bench.MIB) <= 0.011, figures
    # The activations grow with n_ff: the model's shape shows in the rest, not only the mask.
    assert (
        rows[(1024, 4096, 4096, 512)]["floats_per_token"]
        > rows[(1024, 256, 4096, 512)]["floats_per_token"]
    )
