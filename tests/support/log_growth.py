"""How fast llama-server's log and console grow per request behind the gate's wrapper: the
figures `bench/log_growth.py` prints (the contract tests run it small)."""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

from components.llamacpp.gate import LOADED_MARKER
from tests.support.gate_server import cached_prompts, complete, run_gated_llama_server
from tests.support.llama_server import free_port

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
            load_log = _complete_load_log(log)
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


def _complete_load_log(log: Path, timeout: float = 30.0) -> int:
    """The load log's size once the wrapper has copied it up to the `listening on` line.

    llama-server answers /health once it has loaded; its log thread writes the last lines to the
    FIFO, and the wrapper's `sed | head` copies them, a moment later: on a busy machine after
    the first requests, whose window then read as growth of a log that traffic never touches
    (a CI run's first window of 20 requests, once).
    """
    deadline = time.monotonic() + timeout
    while not re.search(f"{re.escape(LOADED_MARKER)}[^\n]*\n", log.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{log}: no {LOADED_MARKER!r} line {timeout:.0f} s after /health")
        time.sleep(0.05)
    return log.stat().st_size


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
