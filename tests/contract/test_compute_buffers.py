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

from tests.conftest import ROOT
from tests.support.modules import load_file

pytestmark = pytest.mark.contract

bench = load_file("bench_compute_buffers", ROOT / "bench" / "compute_buffers.py")


def test_the_cpu_compute_buffer_is_the_mask_plus_activations(tmp_path: Path) -> None:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for n_embd, n_ff in [(1024, 256), (1024, 4096)]:
        model = bench.write_model(tmp_path / f"e{n_embd}-ff{n_ff}", n_embd, n_ff)
        for ctx in (4096, 16384):
            for ubatch in (128, 512):
                key = (n_embd, n_ff, ctx, ubatch, 0, "f16")
                buffers = bench.compute_buffers(model, key, tmp_path / bench.log_name(key))
                assert list(buffers) == ["CPU"]
                rows[key] = bench.row(key, "CPU", buffers["CPU"])
    print("\n" + bench.format_table(list(rows.items())))
    for (n_embd, n_ff, ctx, ubatch, ngl, cache), figures in rows.items():
        assert figures["plan"] >= figures["measured"], figures
        if ctx == 16384:
            grown = figures["measured"] - rows[(n_embd, n_ff, 4096, ubatch, ngl, cache)]["measured"]
            # Two decimals of MiB in each log line.
            assert abs(grown - 2 * (16384 - 4096) * ubatch / bench.MIB) <= 0.011, figures
    # The activations grow with n_ff: the model's shape shows in the rest, not only the mask.
    wide, narrow = rows[(1024, 4096, 4096, 512, 0, "f16")], rows[(1024, 256, 4096, 512, 0, "f16")]
    assert wide["floats_per_token"] > narrow["floats_per_token"]
    # The logs a run kept read back to the same table (how a GPU machine's logs are read).
    assert sorted(bench.from_logs(tmp_path)) == sorted(rows.items())
