"""How fast each `llm-infra` command starts, beside the import floors it is measured against.

Prints, per command, the median wall time of `python -m infra.cli COMMAND --help` (the command's
module imported, its parser built, its help printed) next to two floors: a bare interpreter,
and importing pulumi, pulumi_kubernetes, pulumi_command and pydantic (what render needs anyway).
The standard-library commands (fetch, check-model, gpu-gate, verify, bench) and `--help` are
meant to stay near the bare interpreter, far under the pulumi floor.

    python3 -m bench.cli_start [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from infra.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]

STDLIB_COMMANDS = ("fetch", "check-model", "gpu-gate", "verify", "bench")


def wall_time(argv: list[str], runs: int) -> float:
    """Median seconds of `runs` runs of argv (output discarded)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    """Print the floors, then each command's start time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (median)")
    runs = parser.parse_args().runs
    python = sys.executable
    bare = wall_time([python, "-c", "pass"], runs)
    heavy = wall_time(
        [python, "-c", "import pulumi, pulumi_kubernetes, pulumi_command, pydantic"], runs
    )
    print(f"{'floor: python -c pass':<36}{bare:7.3f} s")
    print(f"{'floor: import pulumi + k8s + command + pydantic':<36}{heavy:7.3f} s")
    print()
    print(f"{'command':<24}{'start':>8}  {'- bare':>8}  {'/ pulumi floor':>14}")
    for argv in [["--help"], *([name, "--help"] for name in COMMANDS)]:
        label = " ".join(argv)
        seconds = wall_time([python, "-m", "infra.cli", *argv], runs)
        kind = " (stdlib)" if argv[0] in STDLIB_COMMANDS or argv == ["--help"] else ""
        print(
            f"{label + kind:<24}{seconds:7.3f}s  {seconds - bare:+7.3f}s  {seconds / heavy:13.2f}x"
        )


if __name__ == "__main__":
    main()
