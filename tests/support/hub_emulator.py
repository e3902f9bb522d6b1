"""A local HTTP server that speaks the part of the Hugging Face hub protocol llm-infra uses.

`/api/models/{repo}/revision/{rev}` and `/api/models/{repo}/tree/{rev}?recursive=true` (as
`huggingface_hub` calls them for `llm-infra lock`); `/{repo}/resolve/{revision}/{path}` with
HEAD, GET and Range (206), `X-Repo-Commit`,
`X-Linked-Size` and `X-Linked-Etag` headers and `X-Error-Code` on errors; optional bearer-token
gating; and faults a test can inject: a connection dropped after N bytes, corrupted bytes, a
fixed status for the next requests of a file, a body sent without Content-Length (as a proxy
that streams it would). Loopback only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from components.payloads import FETCHER_SOURCE

COMMIT = "0123456789abcdef0123456789abcdef01234567"


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

    def sha256(self, repo: str, path: str) -> str:
        return hashlib.sha256(self.repos[repo][path]).hexdigest()


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def _error(self, status: int, code: str) -> None:
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _json(self, document: object) -> None:
            body = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _repo_ok(self, repo: str, revision: str) -> bool:
            """Token, repo and revision as the hub checks them; answers the error if not."""
            if hub.token is not None and self.headers.get("Authorization") != f"Bearer {hub.token}":
                self._error(401, "GatedRepo")
            elif repo not in hub.repos:
                self._error(404, "RepoNotFound")
            elif revision not in ("main", COMMIT):
                self._error(404, "RevisionNotFound")
            else:
                return True
            return False

        def _api(self, parts: list[str]) -> None:
            # api/models/{owner}/{name}/{revision|tree}/{rev}
            if len(parts) < 6 or parts[4] not in ("revision", "tree"):
                return self._error(404, "EntryNotFound")
            repo, kind, revision = "/".join(parts[2:4]), parts[4], parts[5]
            if not self._repo_ok(repo, revision):
                return None
            files = hub.repos[repo]
            if kind == "revision":
                siblings = [{"rfilename": path} for path in sorted(files)]
                return self._json({"id": repo, "sha": COMMIT, "siblings": siblings})
            entries: list[dict[str, object]] = []
            for folder in sorted({p.rsplit("/", 1)[0] for p in files if "/" in p}):
                entries.append({"type": "directory", "path": folder, "oid": "0" * 40, "size": 0})
            for path in sorted(files):
                data = files[path]
                entry: dict[str, object] = {
                    "type": "file",
                    "path": path,
                    "size": len(data),
                    "oid": hashlib.sha1(data).hexdigest(),
                }
                if len(data) > 1024:
                    sha = hashlib.sha256(data).hexdigest()
                    entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
                entries.append(entry)
            return self._json(entries)

        def _send_body(self, path: str, body: bytes | memoryview) -> None:
            step = 64 * 1024 if hub.throttle_bytes_per_s else 1024 * 1024
            for start in range(0, len(body), step):
                chunk = body[start : start + step]
                self.wfile.write(chunk)
                hub.bytes_sent[path] = hub.bytes_sent.get(path, 0) + len(chunk)
                if hub.throttle_bytes_per_s:
                    time.sleep(len(chunk) / hub.throttle_bytes_per_s)

        def _serve(self, head: bool) -> None:
            parsed = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
            hub.requests.append((self.command, parsed, self.headers.get("Range")))
            parts = parsed.lstrip("/").split("/")
            if parts[:2] == ["api", "models"]:
                return self._api(parts)
            if len(parts) < 5 or parts[2] != "resolve":
                return self._error(404, "EntryNotFound")
            repo, revision, path = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            if not self._repo_ok(repo, revision):
                return None
            if path not in hub.repos[repo]:
                return self._error(404, "EntryNotFound")
            forced = hub.status_once.get(path)
            if forced:
                return self._error(forced.pop(0), "Injected")
            data = hub.repos[repo][path]
            start = 0
            status = 200
            header = self.headers.get("Range")
            end = len(data)
            if header and header.startswith("bytes="):
                first, _, last = header[len("bytes=") :].partition("-")
                start = int(first)
                end = min(int(last) + 1, len(data)) if last else len(data)
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                status = 206
            body: bytes | memoryview = memoryview(data)[start:end]
            if path in hub.corrupt_once and not head:
                hub.corrupt_once.discard(path)
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            if path in hub.corrupt_always and not head:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            self.send_response(status)
            if path in hub.omit_length and not head:
                # No length: the body ends when the connection closes.
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Accept-Ranges", "bytes")
            if status == 206 and path not in hub.omit_length:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            self.end_headers()
            if head:
                return None
            limit = hub.drop_after.pop(path, None)
            if limit is not None:
                self._send_body(path, body[:limit])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return None
            try:
                self._send_body(path, body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return None

        def do_GET(self) -> None:
            self._serve(head=False)

        def do_HEAD(self) -> None:
            self._serve(head=True)

    return Handler


@contextmanager
def running_hub(hub: Hub) -> Iterator[Hub]:
    """Serve the hub on 127.0.0.1 on a free port for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
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
