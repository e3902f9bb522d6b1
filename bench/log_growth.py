"""Log growth of the gated llama-server under traffic: the log volume must never fill.

    python3 -m bench.log_growth [--requests 300] [--binary PATH] [--model GGUF] [--ngl N]

Starts llama-server at ``-lv 4`` (the gate's verbosity) with ``-np 1`` and the default 8 GiB
``--cache-ram`` through the pod's load-log wrapper (``gate.server_command``), sends
requests with distinct prompts so the prompt cache fills up (b11434 then logs two lines per
cached prompt on every request), and prints, per window of requests: the cached prompts, the
bytes per request the console (the container log, rotated by the kubelet) grows by, the bytes
the load log on the volume grows by, and the days each would take to fill the 4 GiB volume at
100k requests a day. The console growth is what a plain ``--log-file`` on the volume would
grow by. Defaults run on the CPU build and the tiny test model in a few seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.support.log_growth import (
    format_rows,
    measure,
)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; 1 when the volume log grew with traffic."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--binary", help="llama-server to run (default: scripts/build-llama's)")
    p.add_argument("--model", type=Path, help="GGUF (default: the tiny test model)")
    p.add_argument("--ngl", default="0")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if a.model is None:
            from tests.support.tiny_gguf import write_tiny_split_model

        model = a.model or write_tiny_split_model(Path(tmp), "tiny", 3)[0]
        rows = measure(model, a.requests, a.window, binary=a.binary, ngl=a.ngl)
    print(format_rows(rows))
    grew = any(float(r["log_file_bytes_per_request"] or 0) > 0 for r in rows)
    print(
        "volume log: " + ("GREW with traffic" if grew else "constant after the load (never fills)")
    )
    return 1 if grew else 0


if __name__ == "__main__":
    sys.exit(main())
