"""llama-server started the way the gated pod starts it: through the load-log wrapper.

``components.llamacpp.gate.server_command`` is the container's command; here the same
shell runs with a local llama-server binary (the CPU build by default, the Vulkan build on the
GPU machine) instead of the image's ``/app/llama-server``.

Also the gate's two other real cases on the CPU build: a server whose rpc-server on loopback
plays the GPU (``run_rpc_gated_llama_server``; with ``FUSED_OPS_OFF`` llama.cpp logs its real
"not supported, set to disabled" lines), and a server that crashes at the first decode
(``crash_at_first_decode_server``: /health 200, the connection dropped on every POST).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import pathlib
import re
import socket
import struct
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

from components.llamacpp.gate import load_log_shell
from tests.support.llama_server import (
    LlamaServerStartError,
    _flag_value,
    _wait_healthy,
    free_port,
    llama_server_binary,
    start_in_session,
    stock_llama_server_binary,
    stop_session,
    tiny_server_argv,
)
from tests.support.rpc_server import rpc_build, run_rpc_server

FUSED_OPS_OFF = ("-fa", "auto", "-nkvo", "-ot", r"blk\.0\.=CPU")
"""Flags that make b11434 switch fused ops off on the RPC "GPU": layer 0's weights and every
KV cache stay on the CPU while layer 0 is assigned to RPC0, so the probes of Flash Attention
and the fused DeepSeek V4 HC ops land on another device than the layer
(src/llama-context.cpp:539, :552), the lines a backend lacking those ops prints."""

_CACHE_STATE = re.compile(r"cache state: (\d+) prompts, ([0-9.]+) MiB")


@contextlib.contextmanager
def run_gated_llama_server(
    argv: list[str],
    console: pathlib.Path,
    *,
    binary: str | None = None,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run ``sh -c <load_log_shell> llama-server *argv`` and yield the base URL once healthy.

    ``argv`` must hold ``--log-file LOG`` (the load log the gate reads) and ``--port``; the
    server's console output (the container log, in a pod) goes to ``console``.
    """
    log = _flag_value(argv, "--log-file")
    port = _flag_value(argv, "--port")
    script = load_log_shell(log, binary or stock_llama_server_binary())
    base_url = f"http://127.0.0.1:{port}"
    with console.open("wb") as out:
        # Its own session: the wrapper's FIFO reader is stopped with it (`stop_session`).
        process = start_in_session(
            ["sh", "-c", script, "llama-server", *argv], stdout=out, stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip
        try:
            _wait_healthy(process, base_url, console, timeout)
            yield base_url
        finally:
            stop_session(process)


@contextlib.contextmanager
def run_rpc_gated_llama_server(
    model: pathlib.Path, workdir: pathlib.Path, *extra: str, timeout: float = 180.0
) -> Iterator[tuple[str, pathlib.Path]]:
    """The gated server with an rpc-server on loopback as its only offload device.

    Yields the base URL and the load log (``-lv 4 --log-file``, through the pod's wrapper);
    every layer goes to ``RPC0[127.0.0.1:PORT]`` (``-ngl all``), so the gate's device prefix is
    ``RPC``. ``extra`` are more llama-server flags (e.g. ``FUSED_OPS_OFF``).
    """
    log = workdir / "llama-server.log"
    rpc = rpc_build() / "ggml-rpc-server"
    with run_rpc_server(rpc, free_port(), workdir / "rpc-server.log") as endpoint:
        argv = tiny_server_argv(model, "--rpc", endpoint, "-ngl", "all", "-lv", "4",
                                "--log-file", str(log), *extra, parallel=1)  # fmt: skip
        console = workdir / "console.log"
        with run_gated_llama_server(
            argv, console, binary=llama_server_binary(), timeout=timeout
        ) as url:
            yield url, log


class _CrashAtDecode(http.server.BaseHTTPRequestHandler):
    """/health 200 as a loaded llama-server; every POST dropped with a reset, no answer."""

    def do_GET(self) -> None:
        body = b'{"status":"ok"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        # SO_LINGER 0: close sends a reset, as the kernel does for a process that aborted.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def crash_at_first_decode_server() -> Iterator[str]:
    """A stdlib HTTP server that loads (/health 200) and dies on the first decode request."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CrashAtDecode)
    # Polls for shutdown() every 50 ms, not serve_forever's default 0.5 s.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def complete(base_url: str, prompt: str, max_tokens: int = 4, timeout: float = 120.0) -> Any:
    """One non-streamed /completion request (cached into the prompt cache by llama-server)."""
    body = json.dumps({"prompt": prompt, "n_predict": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(
        base_url + "/completion", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def cached_prompts(console_text: str) -> int | None:
    """The prompt count of the last ``cache state: N prompts`` line (``-lv 4``)."""
    found = _CACHE_STATE.findall(console_text)
    return int(found[-1][0]) if found else None


__all__ = [
    "FUSED_OPS_OFF",
    "LlamaServerStartError",
    "cached_prompts",
    "complete",
    "crash_at_first_decode_server",
    "run_gated_llama_server",
    "run_rpc_gated_llama_server",
]
