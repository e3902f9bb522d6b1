"""The plan's per-device weights and KV cache match what a real Vulkan GPU allocated.

The logs under tests/fixtures/gpu_gate/ are real llama-server b11434 loads of the rendered
strix-halo argv on a Vulkan GPU (an H200 through NVIDIA's Vulkan driver; how they were made:
that folder's README). Each test regenerates the same model, plans it with the stack's flags
(`-ngl 40` keeps 4 of llama43's 44 offloadable layers on the CPU; deepseek4's 5 all go to the
GPU) and holds the plan to the buffers the log shows on each device: weights and KV within 2%,
the compute estimate never below what the device reserved (and llama43's within 2%).
`bench/plan_vs_device.py` prints the same comparison.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import llama_archs
from tests.support.device_plan import FIXTURES, Row, compare, format_rows
from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model

TOLERANCE = 0.02
# Each log line prints two decimals of MiB; deepseek4's KV is seven lines.
ROUNDING_MIB = 0.05


def _check(rows: list[Row]) -> None:
    print("\n" + format_rows("model", rows))
    by_key = {(r.device, r.kind): r for r in rows}
    for (device, kind), row in by_key.items():
        if kind == "compute":
            assert row.planned >= row.logged, f"{device} compute under-planned: {row}"
        else:
            assert abs(row.planned - row.logged) <= TOLERANCE * row.logged + ROUNDING_MIB, row
    assert by_key[("vram", "weights")].logged > 0, "the log shows no GPU weights"


def test_llama43_with_four_layers_on_the_cpu(tmp_path: Path) -> None:
    shards = write_tiny_model(tmp_path / "llama43", "llama43", 3, LLAMA43_SPEC)
    rows = compare("strix-halo", shards, FIXTURES / "llama43-gpu.load.log")
    _check(rows)
    # The CPU keeps 4 layers' weights and KV: the split is the plan's, not only the totals.
    ram = {r.kind: r for r in rows if r.device == "ram"}
    assert ram["weights"].logged > 0 and ram["kv_cache"].logged > 0
    # Compute buffers are measured for llama-style attention (`vulkan_compute_bytes`): the
    # host's is the mask and the embeddings, the GPU's adds the copy of a CPU layer's KV cache.
    for device in ("vram", "ram"):
        compute = next(r for r in rows if (r.device, r.kind) == (device, "compute"))
        assert compute.planned <= (1 + TOLERANCE) * compute.logged, compute


def test_deepseek4_all_on_the_gpu() -> None:
    try:
        model = llama_archs.deepseek4_model()
    except llama_archs.ArchsBuildError as exc:
        pytest.fail(str(exc))
    rows = compare("strix-halo", [model], FIXTURES / "deepseek4-gpu.load.log")
    _check(rows)
    assert {r.kind: r.logged for r in rows if r.device == "ram"}["kv_cache"] == 0
