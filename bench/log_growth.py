"""Log growth of the gated llama-server under traffic: the log volume must never fill.

    python bench/log_growth.py [--requests 300] [--binary PATH] [--model GGUF] [--ngl N]

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.gate_server import cached_prompts, complete, run_gated_llama_server  # noqa: E402
from tests.support.llama_server import free_port  # noqa: E402

VOLUME_BYTES = 4 * 1024**3
REQUESTS_PER_DAY = 100_000


def days_to_fill(bytes_per_request: float) -> str:
    """Days until the 4 GiB log volume is full at 100k requests a day ("never" at zero)."""
    if bytes_per_request <= 0:
        return "never"
    return f"{VOLUME_BYTES / (bytes_per_request * REQUESTS_PER_DAY):,.2f}"


def measure(
    model: Path,
    requests: int,
    window: int,
    *,
    binary: str | None = None,
    ngl: str = "0",
    words: int = 24,
) -> list[dict[str, float | int | None]]:
    """Run the traffic and return one row per window (see the module docstring)."""
    rows: list[dict[str, float | int | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        log, console = Path(tmp) / "llama-server.log", Path(tmp) / "console.log"
        argv = [
            "-m", str(model), "--port", str(free_port()), "-np", "1", "-c", "4096",
            "--threads", "2", "-ngl", ngl, "-lv", "4", "--log-file", str(log),
        ]  # fmt: skip
        with run_gated_llama_server(argv, console, binary=binary) as url:
            load_log = log.stat().st_size
            before_c, before_f = console.stat().st_size, log.stat().st_size
            for i in range(1, requests + 1):
                complete(url, f"request {i:06d}: " + " ".join(f"w{i}x{k}" for k in range(words)))
                if i % window == 0:
                    after_c, after_f = console.stat().st_size, log.stat().st_size
                    rows.append({
                        "requests": i,
                        "cached_prompts": cached_prompts(console.read_text(errors="replace")),
                        "console_bytes_per_request": (after_c - before_c) / window,
                        "log_file_bytes_per_request": (after_f - before_f) / window,
                        "log_file_bytes": after_f,
                        "load_log_bytes": load_log,
                    })  # fmt: skip
                    before_c, before_f = after_c, after_f
    return rows


def format_rows(rows: list[dict[str, float | int | None]]) -> str:
    """The growth table, with days to fill 4 GiB at 100k requests a day."""
    head = ("requests", "cached prompts", "console B/req", "days (plain --log-file)",
            "volume log B/req", "days (gated)", "volume log bytes")  # fmt: skip
    out = [head]
    for r in rows:
        console, volume = (
            float(r["console_bytes_per_request"] or 0),
            float(r["log_file_bytes_per_request"] or 0),
        )
        out.append((str(r["requests"]), str(r["cached_prompts"]), f"{console:,.0f}",
                    days_to_fill(console), f"{volume:,.0f}", days_to_fill(volume),
                    f"{r['log_file_bytes']:,}"))  # fmt: skip
    widths = [max(len(row[i]) for row in out) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in out)


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
