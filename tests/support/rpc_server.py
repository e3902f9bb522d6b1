"""Start real llama.cpp rpc-server processes (the b11434 RPC build) on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-rpc-llama"
BUILD_TIMEOUT = 60 * 60.0
"""The first build of llama-server and rpc-server takes ~15 min on 2 cores."""


def rpc_build() -> Path:
    """The bin/ folder of the RPC build (`scripts/build-rpc-llama`, cached after the first run)."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
        env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get(
            "CMAKE_BUILD_PARALLEL_LEVEL", "2")},
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def run_rpc_server(binary: Path, port: int, log_path: Path, timeout: float = 30.0) -> Iterator[str]:
    """Run `rpc-server -H 127.0.0.1 -p PORT` and yield its `host:port` once it listens."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while not _listening(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"rpc-server on port {port} did not start: {log_path.read_text()[-2000:]}"
                    )
                time.sleep(0.1)
            yield f"127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
