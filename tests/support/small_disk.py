"""Run commands against a small real disk: a tmpfs of a given size, mounted in a private user
and mount namespace (no root needed, nothing left mounted), so free space is what the kernel
says it is, including space held by a deleted file that a process still maps.

`python3 small_disk.py SIZE DIR STEPS.json` mounts a tmpfs of SIZE at DIR and runs each step,
`{"argv": [...]}` (waits, records exit code and output) or `{"hold": [paths]}` (starts a process
that maps those files and closes their descriptors, as a server loading a model does) or
`{"release": true}` (ends the holders). It prints one JSON list of results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HOLDER = (
    "import mmap, sys, time\n"
    "maps = []\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, 'rb') as handle:\n"
    "        maps.append(mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ))\n"
    "print('mapped', flush=True)\n"
    "time.sleep(600)\n"
)


def command(size: str, directory: Path, steps: list[dict[str, object]]) -> list[str]:
    """The command line that runs steps on a fresh tmpfs in a private namespace."""
    return [
        "unshare", "--user", "--map-root-user", "--mount",
        sys.executable, __file__, size, str(directory), json.dumps(steps),
    ]  # fmt: skip


def main(argv: list[str]) -> int:
    size, directory, steps = argv[0], Path(argv[1]), json.loads(argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                   check=True)  # fmt: skip
    results: list[dict[str, object]] = []
    holders: list[subprocess.Popen[str]] = []
    try:
        for step in steps:
            if "hold" in step:
                holder = subprocess.Popen(
                    [sys.executable, "-c", HOLDER, *step["hold"]], stdout=subprocess.PIPE, text=True
                )
                assert holder.stdout is not None and holder.stdout.readline() == "mapped\n"
                holders.append(holder)
                results.append({"held": step["hold"]})
            elif "release" in step:
                for holder in holders:
                    holder.kill()
                    holder.wait()
                holders.clear()
                results.append({"released": True})
            else:
                done = subprocess.run(step["argv"], capture_output=True, text=True, check=False)
                results.append(
                    {"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
                )
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
