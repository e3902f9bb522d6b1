"""The stand-in hub (`infra.hub.server`, what `llm-infra hub serve` runs) over repos a test holds
in memory, with faults a test can inject.

The protocol is the package's one implementation; this adds bearer-token gating a test switches
on and off, a record of the requests and of the bytes sent per file, and faults: a connection
dropped after N bytes, corrupted bytes, a fixed status for the next requests of a file, a body
sent without Content-Length (as a proxy that streams it would), a throttled transfer, and a
pause that holds every file body at its first byte until the test resumes the hub (so a test
knows a client is mid-download, whatever the machine's speed). Loopback only.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from components.payloads import FETCHER_SOURCE
from infra.hub.repos import HubFile, MemoryRepos
from infra.hub.server import HubHandler, HubServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"

STOP_POLL_S = 0.05
"""How often a test server's serve_forever looks for shutdown()."""


@dataclass
class Hub:
    """Repos, files and injected faults; `requests` records (method, path, Range) per request."""

    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    token: str | None = None
    drop_after: dict[str, int] = field(default_factory=dict)
    corrupt_once: set[str] = field(default_factory=set)
    corrupt_always: set[str] = field(default_factory=set)
    status_once: dict[str, list[int]] = field(default_factory=dict)
    omit_length: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    bytes_sent: dict[str, int] = field(default_factory=dict)
    throttle_bytes_per_s: float | None = None
    url: str = ""
    paused: bool = False
    held: int = 0
    """File bodies waiting at their first byte for `resume()`."""
    _changed: threading.Condition = field(
        default_factory=threading.Condition, repr=False, compare=False
    )

    def sha256(self, repo: str, path: str) -> str:
        return hashlib.sha256(self.repos[repo][path]).hexdigest()

    def pause(self) -> None:
        """Hold every file body at its first byte (headers sent) until `resume()`."""
        with self._changed:
            self.paused = True

    def resume(self) -> None:
        """Let held and later file bodies go."""
        with self._changed:
            self.paused = False
            self._changed.notify_all()

    def wait_held(self, count: int, timeout: float = 60.0) -> bool:
        """Wait until `count` file bodies are held; False if that did not happen in time."""
        with self._changed:
            return self._changed.wait_for(lambda: self.held >= count, timeout)

    def hold_while_paused(self) -> None:
        """Where a file body waits while the hub is paused (the handler's thread)."""
        with self._changed:
            self.held += 1
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self.paused)
            self.held -= 1


def _lfs_in_tests(path: str, size: int) -> bool:
    # The tests' small GGUF stand-ins are LFS files, their configs plain git files.
    return size > 1024


def _handler(hub: Hub) -> type[HubHandler]:
    """The stand-in hub's handler with the test's faults and records."""

    class FaultyHandler(HubHandler):
        def on_request(self, path: str) -> None:
            hub.requests.append((self.command, path, self.headers.get("Range")))

        def required_token(self) -> str | None:
            return hub.token

        def forced_status(self, path: str) -> int | None:
            forced = hub.status_once.get(path)
            return forced.pop(0) if forced else None

        def omit_length(self, path: str) -> bool:
            return path in hub.omit_length

        def send_file_body(self, repo: str, path: str, file: HubFile, start: int, end: int) -> None:
            hub.hold_while_paused()
            body: bytes | memoryview = memoryview(hub.repos[repo][path])[start:end]
            if path in hub.corrupt_once:
                hub.corrupt_once.discard(path)
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            if path in hub.corrupt_always:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            limit = hub.drop_after.pop(path, None)
            if limit is not None:
                self._send(path, body[:limit])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self._send(path, body)

        def _send(self, path: str, body: bytes | memoryview) -> None:
            step = 64 * 1024 if hub.throttle_bytes_per_s else 1024 * 1024
            for start in range(0, len(body), step):
                chunk = body[start : start + step]
                # Counted before the write: a client done with the bytes may return, and its
                # test read the count, before this thread runs again.
                hub.bytes_sent[path] = hub.bytes_sent.get(path, 0) + len(chunk)
                try:
                    self.wfile.write(chunk)
                except OSError:
                    hub.bytes_sent[path] -= len(chunk)
                    raise
                if hub.throttle_bytes_per_s:
                    time.sleep(len(chunk) / hub.throttle_bytes_per_s)

    return FaultyHandler


@contextmanager
def running_hub(hub: Hub) -> Iterator[Hub]:
    """Serve the hub on 127.0.0.1 on a free port for the duration of the block."""
    source = MemoryRepos(hub.repos, COMMIT, is_lfs_file=_lfs_in_tests)
    server = HubServer(source, handler=_handler(hub))
    # `infra.hub.server.serving` as the tests need it: a stop within 50 ms, not the 0.5 s
    # serve_forever polls at by default (each test starts and stops a hub).
    thread = threading.Thread(target=server.serve_forever, args=(STOP_POLL_S,), daemon=True)
    thread.start()
    try:
        hub.url = server.url
        yield hub
    finally:
        hub.resume()  # a held body's thread ends before the server does
        server.shutdown()
        server.server_close()


def run_fetcher(hub: Hub, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """The fetcher payload as a process against the emulator (HF_TOKEN only when given)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env["HF_ENDPOINT"] = hub.url
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, str(FETCHER_SOURCE), *args], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip
