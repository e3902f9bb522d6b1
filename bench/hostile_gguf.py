"""Peak memory of `llm-infra` reading hostile GGUF headers: each case of
`tests/support/hostile_gguf.py` through `plan --gguf` and `hub stub`, one process each, with the
peak resident set of each run (the kernel's ru_maxrss of that child) beside a well-formed header's.

    python3 -m bench.hostile_gguf

The worst case is printed last. Before the reader checked what a header declares against the bytes
left, `block_count` 2^40 reached 2.7 GB before a MemoryError.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.hostile_gguf import HOSTILE_HEADERS, full
from tests.support.lock_hub import stack_file
from tests.support.project import project_env

# Linux keeps a process's peak across fork and exec, so the run is started from a bare
# interpreter (~10 MiB) rather than from this process: its figure is the command's own peak.
_MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def peak_mib(argv: list[str], cwd: Path) -> tuple[int, float]:
    """Exit status and peak resident MiB of one run."""
    measured = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _MEASURE, *argv],
        cwd=cwd, env=project_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    status, kib = measured.stdout.split()
    return int(status), int(kib) / 1024


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        stack = stack_file(work)
        # The well-formed model's trained context is 4096 tokens.
        stack.write_text(stack.read_text().replace(
            "contextSize: 65536", "contextSize: 2048\n    minSlotContext: 2048"))  # fmt: skip
        well_formed = full()
        well_formed += bytes(263584 - len(well_formed))  # as large as its tensor table declares
        cases = {
            "(well-formed)": well_formed,
            **{n: data for n, (data, _) in HOSTILE_HEADERS.items()},
        }
        rows = []
        for name, data in cases.items():
            shard = work / f"{name}.gguf"
            shard.write_bytes(data)
            out = work / "out"
            out.mkdir(exist_ok=True)
            plan = peak_mib(
                [sys.executable, "-m", "infra.cli", "plan", str(stack), "--gguf", str(shard)], work
            )
            stub = peak_mib(
                [sys.executable, "-m", "infra.cli", "hub", "stub", str(shard), "--out", str(out)],
                work,
            )
            rows.append((name, plan, stub))
        print(f"{'case':<26} {'plan --gguf':>18} {'hub stub':>18}")
        for name, (plan_rc, plan_mib), (stub_rc, stub_mib) in rows:
            plan_text = f"{plan_mib:.1f} MiB (rc {plan_rc})"
            print(f"{name:<26} {plan_text:>18} {stub_mib:>9.1f} MiB (rc {stub_rc})")
        worst = max(rows[1:], key=lambda row: max(row[1][1], row[2][1]))
        print(f"worst: {worst[0]}: {max(worst[1][1], worst[2][1]):.1f} MiB peak "
              f"(well-formed: {max(rows[0][1][1], rows[0][2][1]):.1f} MiB)")  # fmt: skip


if __name__ == "__main__":
    main()
