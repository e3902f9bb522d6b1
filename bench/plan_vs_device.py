"""The memory plan beside the buffers real llama-server loads logged, per device.

    python3 -m bench.plan_vs_device [--stack strix-halo] [--log-dir tests/fixtures/gpu_gate]

For each model of the real Vulkan load logs under ``tests/fixtures/gpu_gate/`` (the rendered
strix-halo argv on an H200 through NVIDIA's Vulkan driver: ``llama43`` with ``-ngl 40`` keeping
4 layers on the CPU, and llama.cpp's tiny deepseek4), it regenerates the same model, plans it
with the stack's flags, and prints the plan's weights, KV cache and compute buffers per device
(``vram``: ``Vulkan0``; ``ram``: ``CPU``, ``CPU_Mapped``, ``Vulkan_Host``) beside the buffers
the log shows. Weights and KV come from the GGUF header and are exact; compute buffers are the
planner's estimate (the stack's ``memory.computeGib`` is a measurement of its own model).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.support.device_plan import FIXTURES, compare, format_rows
from tests.support.llama_archs import deepseek4_model
from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", default="strix-halo", help="the stack whose flags are planned")
    p.add_argument("--log-dir", type=Path, default=FIXTURES, help="where MODEL-gpu.load.log are")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "llama43": write_tiny_model(Path(tmp) / "llama43", "llama43", 3, LLAMA43_SPEC),
            "deepseek4": [deepseek4_model()],
        }
        for name, shards in models.items():
            rows = compare(a.stack, shards, a.log_dir / f"{name}-gpu.load.log")
            print(format_rows(name, rows))
            ratios = [r.ratio for r in rows if r.kind != "compute" and r.ratio is not None]
            worst = max((abs(ratio - 1) for ratio in ratios), default=0.0)
            print(f"{name}: weights and KV within {worst:.2%} of the log on every device\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
