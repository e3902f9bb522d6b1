"""`llm-infra` run in this process: `infra.cli.main(argv)` with its output and exit code captured.

What the tests' subprocess wrappers did, without starting a Python and importing pulumi again per
call. A test about the process itself (exit codes under signals, import time, what a fresh
interpreter loads) still starts one.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

from infra.cli import main
from tests.conftest import ROOT


def _exit_code(code: object) -> tuple[int, str]:
    """The status and the message a SystemExit(code) leaves, as the interpreter reports them."""
    if code is None:
        return 0, ""
    if isinstance(code, int):
        return code, ""
    return 1, f"{code}\n"


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: Path | str | None) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_cli(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: str = "",
) -> subprocess.CompletedProcess[str]:
    """`llm-infra ARGV` in this process: exit code, stdout and stderr as a subprocess reports them.

    ``env`` replaces the environment for the call (as ``subprocess.run(env=...)``), ``cwd`` is the
    working directory. An exception that escapes ``main`` is what the interpreter would print:
    a traceback on stderr and exit 1, so a test that asserts "no traceback" still can fail.
    """
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with (
            _environment(env, cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                status = main(list(argv))
            except SystemExit as stop:
                status, message = _exit_code(stop.code)
                err.write(message)
            except Exception:
                err.write(traceback.format_exc())
                status = 1
    finally:
        sys.stdin = saved_stdin
    texts = []
    for stream in (out, err):
        stream.flush()
        buffer = stream.buffer
        assert isinstance(buffer, io.BytesIO)
        texts.append(buffer.getvalue().decode("utf-8"))
    return subprocess.CompletedProcess(["llm-infra", *argv], status, texts[0], texts[1])


def llm_infra(*args: str, cwd: Path | str = ROOT) -> subprocess.CompletedProcess[str]:
    """`llm-infra ARGS` from the checkout (or ``cwd``), in this process."""
    return run_cli(list(args), cwd=cwd)


@contextlib.contextmanager
def as_at_a_terminal() -> Iterator[None]:
    """Around starting a child that a test presses Ctrl-C at: SIGINT as a terminal's foreground
    job has it. A shell starts background jobs with SIGINT ignored, a child inherits that, and
    Python then installs no KeyboardInterrupt handler: run from such a job (`nohup ... &`), the
    test would press Ctrl-C at a command that cannot hear it. A signal the parent handles is back
    to its default in the child after exec, so this sets a handler here, in the parent, for the
    start: a `preexec_fn` runs Python between fork and exec, which can hang the child when
    another thread (gRPC's) held a lock at the fork."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
