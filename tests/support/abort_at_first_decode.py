"""A real llama-server that aborts when its first request starts decoding, as a build whose
kernels crash at the first decode does (ggml-org/llama.cpp#29028: the load is fine, the first
token is not).

`python abort_at_first_decode.py LLAMA_SERVER ARGS...` runs the server as its child, watches
the child's `--log-file` (at `-lv 4` llama-server logs `processing task` when a slot starts a
request) and sends it SIGABRT, GGML_ABORT's signal, then exits with the child's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    log = argv[argv.index("--log-file") + 1]
    child = subprocess.Popen(argv)
    try:
        while child.poll() is None:
            try:
                with open(log, errors="replace") as f:
                    if "processing task" in f.read():
                        os.kill(child.pid, signal.SIGABRT)
                        break
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        return child.wait()
    finally:
        if child.poll() is None:
            child.kill()


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(128 - code if code < 0 else code)
