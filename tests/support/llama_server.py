"""Start a real llama-server (the one b11434 build, `scripts/build-llama`) until it is ready."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support import llama_build


class LlamaServerStartError(RuntimeError):
    """llama-server exited or did not become healthy in time."""


def llama_server_binary() -> str:
    """Absolute path of the build's ``llama-server`` (`scripts/build-llama`, built once).

    It loads no CPU backend of its own accord: this also makes ``GGML_BACKEND_PATH`` (the test
    run's CPU variant, `tests.support.llama_build.default_variant`) the default of this process's
    environment, so every llama-server, rpc-server or script a test starts runs that variant
    unless it names another.
    """
    path = llama_build.binary("llama-server")
    os.environ.setdefault("GGML_BACKEND_PATH", llama_build.variant_env()["GGML_BACKEND_PATH"])
    return str(path)


def stock_llama_server_binary() -> str:
    """The build's llama-server shaped as the stock server images (no RPC backend beside it)."""
    llama_server_binary()  # the run's CPU variant for every process started from here on
    return str(llama_build.stock_llama_server())


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


def stop(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Stop a test's child process: SIGTERM, then SIGKILL after `grace` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_in_session(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a test's process in a session of its own, so `stop_session` finds all it starts
    (the load-log wrapper's FIFO reader, say) by the session id, the process's pid."""
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kwargs)


def session_processes(session: int) -> list[str]:
    """The live processes of a session, as "PID COMMAND" (zombies left out: they hold nothing)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        # After the command name in parentheses: state, ppid, pgrp, session, ...
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(f"{entry.name} {command.strip()[:200]}")
    return found


def _wait_gone(session: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while session_processes(session):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_session(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Stop a process from `start_in_session` and everything it started.

    The process goes first, as the kubelet stops a container's main process, so a reader of its
    output drains what it wrote and ends on its own; whatever of the session is left after a
    short wait (a reader still blocked opening a FIFO nobody writes) gets SIGTERM, then SIGKILL
    after `grace` seconds.
    """
    stop(process, grace)
    for sig, wait in ((None, 2.0), (signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
        if _wait_gone(process.pid, wait):
            return


@dataclass(frozen=True)
class RunningServer:
    """A llama-server a test started: its base URL and the session everything it started is in."""

    url: str
    session: int


@contextlib.contextmanager
def llama_server_session(
    argv: list[str],
    *,
    timeout: float = 60.0,
    log_path: pathlib.Path | None = None,
    binary: str | None = None,
    cpu_variant: str | None = None,
) -> Iterator[RunningServer]:
    """Run ``llama-server *argv`` in a session of its own until ``/health`` is 200.

    ``argv`` are the server's arguments (without the executable) and must include
    ``--port``; ``--host`` defaults to 127.0.0.1 like llama-server itself. The
    combined stdout/stderr goes to ``log_path`` (a temporary file if omitted), so a
    chatty server can never block on a full pipe. The server and whatever it started are
    always stopped on exit, including when startup fails. ``binary`` replaces the build's
    llama-server (``sh`` runs the container's wrapper); ``cpu_variant`` names the CPU backend
    it loads (default: the test run's, see `tests.support.llama_build`).
    """
    binary = binary or llama_server_binary()
    env = llama_build.variant_env(cpu_variant) if cpu_variant else None
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
        process = start_in_session([binary, *argv], env=env, stdout=log, stderr=subprocess.STDOUT)
        stack.callback(stop_session, process)
        _wait_healthy(process, base_url, log_path, timeout)
        yield RunningServer(base_url, process.pid)


@contextlib.contextmanager
def run_llama_server(
    argv: list[str],
    *,
    timeout: float = 60.0,
    log_path: pathlib.Path | None = None,
    binary: str | None = None,
    cpu_variant: str | None = None,
) -> Iterator[str]:
    """`llama_server_session`, yielding only the base URL."""
    with llama_server_session(
        argv, timeout=timeout, log_path=log_path, binary=binary, cpu_variant=cpu_variant
    ) as server:
        yield server.url


def tiny_server_argv(model: pathlib.Path, *extra: str, parallel: int = 4) -> list[str]:
    """llama-server argv for a tiny test model on a free port, sized for this 2-core machine."""
    return [
        "-m", str(model), "--port", str(free_port()), "-c", str(2048 * parallel),
        "-np", str(parallel), "--threads", str(min(os.cpu_count() or 1, 2)), *extra,
    ]  # fmt: skip


def replace_value(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with the value after ``flag`` replaced."""
    index = argv.index(flag)
    return [*argv[: index + 1], value, *argv[index + 2 :]]


def same_cpu_floor(expectations: pathlib.Path) -> None:
    """Turn off a recorded expectation file's decode-speed check (``min_decode_fraction`` 0).

    Recorded and checked on one CPU, a tiny model decodes a case in a few milliseconds: a busy
    machine (other test workers' servers) alone made a check decode at 8% of its own recording
    (524 against 6338 tok/s), below any floor that would still catch a fallback. These files
    test the answers; the speed check has its own test, with a recording a thousand times faster
    than the machine and the default floor.
    """
    doc = json.loads(expectations.read_text())
    doc["tolerance"] = {**doc.get("tolerance", {}), "min_decode_fraction": 0.0}
    expectations.write_text(json.dumps(doc))
