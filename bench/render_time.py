"""Render time of each stack: a fresh process per run (imports included), then in-process runs.

    python3 -m bench.render_time [--runs N]

Prints wall-clock figures; the design target is ≤ 2 s per stack on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(
    p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")
)


def cold(stack: str, out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", stack, "--out", str(out)],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - started


def warm(stack: str) -> float:
    from infra import program, render
    from infra.config import read_stack_file

    stack_file = read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    started = time.perf_counter()
    render.run_program(program.main, config, secret_keys, stack=stack)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'stack':<12} {'cold median s':>14} {'cold max s':>11} {'in-process median s':>20}")
    with tempfile.TemporaryDirectory() as tmp:
        for stack in STACKS:
            colds = [cold(stack, Path(tmp) / stack) for _ in range(args.runs)]
            warms = [warm(stack) for _ in range(args.runs)]
            print(
                f"{stack:<12} {statistics.median(colds):>14.2f} {max(colds):>11.2f} "
                f"{statistics.median(warms):>20.3f}"
            )


if __name__ == "__main__":
    main()
