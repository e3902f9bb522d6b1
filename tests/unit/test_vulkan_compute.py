"""The planner's Vulkan compute buffers against what llama-server b11434 reserved on a real GPU.

`tests/fixtures/gpu_gate/compute/h200-compute-buffers-f16.txt` is `bench/compute_buffers.py` on
an H200 through NVIDIA's Vulkan driver: 2-layer llamas (n_embd 512-2048, n_ff 256-4096) with
every layer on the GPU, an F16 KV cache, contexts 4k-64k and ubatches 128 and 512. The four
load logs beside it are from the same run. The plan must never fall below a reserved buffer and
must stay within 2% of it (plus the quarter MiB of fixed slack).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from components.payloads.gpu_gate import parse_load_log
from infra.plan.deepseek4 import AttentionShape
from infra.plan.llamacpp import VULKAN_SLACK_BYTES, vulkan_compute_bytes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu_gate" / "compute"
TABLE = FIXTURES / "h200-compute-buffers-f16.txt"
MIB = 1024**2
DEVICES: dict[str, Literal["gpu", "host"]] = {"Vulkan0": "gpu", "Vulkan_Host": "host"}

Row = tuple[int, int, int, int, str, float]
"""(n_embd, n_ff, ctx, ubatch, device, MiB) of one reserved buffer."""


def table() -> list[Row]:
    rows = []
    for line in TABLE.read_text().splitlines()[1:]:
        n_embd, n_ff, ctx, ubatch, _ngl, device, mib = line.split()[:7]
        rows.append((int(n_embd), int(n_ff), int(ctx), int(ubatch), device, float(mib)))
    return rows


def shape(n_embd: int, n_ff: int) -> AttentionShape:
    """The generated models' shape (bench/compute_buffers.py: 128-wide heads, 380 tokens)."""
    n_head = max(n_embd // 128, 1)
    return AttentionShape(
        kind="standard", n_layer=2, n_head_kv=(n_head, n_head), head_k=128, head_v=128,
        n_head=n_head, n_embd=n_embd, n_ff=n_ff, n_vocab=380,
    )  # fmt: skip


def test_the_table_covers_every_shape_context_ubatch_and_device() -> None:
    rows = table()
    keys = {(e, ff, c, ub, d) for e, ff, c, ub, d, _ in rows}
    assert len(keys) == len(rows) == 6 * 3 * 2 * 2
    assert {d for *_, d, _ in rows} == set(DEVICES)


@pytest.mark.parametrize("log", sorted(FIXTURES.glob("*.load.log")), ids=lambda p: p.name)
def test_the_table_is_what_the_load_logs_say(log: Path) -> None:
    e, ff, c, ub = (int(part[len(tag):]) for part, tag in zip(
        log.name.split("-")[:4], ("e", "ff", "c", "ub"), strict=True))  # fmt: skip
    logged = parse_load_log(log.read_text()).compute_buffers_mib
    expected = {
        d: mib for (te, tff, tc, tub, d, mib) in table() if (te, tff, tc, tub) == (e, ff, c, ub)
    }
    assert logged == expected


@pytest.mark.parametrize("row", table(), ids=lambda r: "e{}-ff{}-c{}-ub{}-{}".format(*r[:5]))
def test_the_plan_holds_each_reserved_buffer_within_two_percent(row: Row) -> None:
    n_embd, n_ff, ctx, ubatch, device, mib = row
    planned = vulkan_compute_bytes(shape(n_embd, n_ff), ctx, ubatch, DEVICES[device]) / MIB
    assert planned >= mib, (planned, mib)
    assert planned <= 1.02 * mib + VULKAN_SLACK_BYTES / MIB, (planned, mib)
