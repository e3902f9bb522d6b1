"""Start real llama.cpp rpc-server processes (the one b11434 build, with GGML_RPC) on loopback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support import llama_build
from tests.support.llama_server import llama_server_binary, stop


def rpc_build() -> Path:
    """The bin/ folder of the one build (`scripts/build-llama`): llama-server and rpc-server."""
    llama_server_binary()  # sets the run's CPU variant for the processes started below
    return llama_build.binary("ggml-rpc-server").parent


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
            stop(process)
