"""The Hugging Face hub protocol on loopback, over repos in a directory or in memory.

What `huggingface_hub` 2.x, `llm-infra lock` and the fetcher call:

- `GET /api/models/{repo}[/revision/{rev}]`: `{"id", "sha", "siblings": [{"rfilename"}]}`;
- `GET /api/models/{repo}/tree/{rev}[/{folder}][?recursive=true]`: entries with `type`, `path`,
  `size`, `oid` (the git blob id) and, for an LFS file, `lfs: {oid (its sha256), size,
  pointerSize}`;
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: `X-Repo-Commit`, `ETag` and `X-Linked-Etag` (an LFS
  file's sha256, else its git blob id), `X-Linked-Size`, `Accept-Ranges: bytes`; `Range:
  bytes=A-B`, `A-` or `-N` answers 206 with `Content-Range`, a range past the end 416;
- errors carry `X-Error-Code` (`GatedRepo` 401 when a token is required and not sent,
  `RepoNotFound`, `RevisionNotFound`, `EntryNotFound` 404) and `X-Error-Message`.

A repo's revisions are `main` and its commit id. The repos are `infra.hub.repos`'s:
`DirectoryRepos` serves `DIR/OWNER/NAME/...` (its commit id is a digest of the files' paths,
sizes and sha256, so a changed file is a new commit, as on the hub); `MemoryRepos` serves bytes
held by a test. The handler's hooks
(`on_request`, `forced_status`, `omit_length`, `send_file_body`) are where the tests' emulator
injects its faults. The server binds to 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from infra.hub.repos import (
    FileChanged,
    HubFile,
    Repo,
    RepoSource,
    lfs_pointer,
)

LOOPBACK = "127.0.0.1"


class HubServer(ThreadingHTTPServer):
    """The stand-in hub on 127.0.0.1 (port 0: a free one)."""

    daemon_threads = True

    def __init__(
        self,
        source: RepoSource,
        port: int = 0,
        token: str | None = None,
        handler: type[HubHandler] | None = None,
    ) -> None:
        self.source = source
        self.token = token
        """The bearer token every request must carry (None: the repos are public)."""
        super().__init__((LOOPBACK, port), handler or HubHandler)

    @property
    def url(self) -> str:
        """The endpoint to give `--endpoint` or `HF_ENDPOINT`."""
        return f"http://{LOOPBACK}:{self.server_address[1]}"


@contextmanager
def serving(server: HubServer) -> Iterator[HubServer]:
    """Serve on a thread for the duration of the block."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class HubHandler(BaseHTTPRequestHandler):
    """One request to the stand-in hub."""

    protocol_version = "HTTP/1.1"
    server: HubServer

    def log_message(self, format: str, *args: object) -> None:
        return

    # -- hooks (the tests' emulator injects faults through these) --

    def on_request(self, path: str) -> None:
        """Called first with each request's decoded path."""

    def required_token(self) -> str | None:
        """The bearer token requests must carry, or None."""
        return self.server.token

    def forced_status(self, path: str) -> int | None:
        """A status to answer a resolve of `path` with instead of its bytes."""
        return None

    def omit_length(self, path: str) -> bool:
        """Send the body of `path` without Content-Length, ended by closing the connection."""
        return False

    def send_file_body(self, repo: str, path: str, file: HubFile, start: int, end: int) -> None:
        """Write the bytes from start to end of a file."""
        for block in file.read(start, end):
            self.wfile.write(block)

    # -- the protocol --

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def _error(self, status: int, code: str, message: str, body: bool = True) -> None:
        text = json.dumps({"error": message}).encode() if body and self.command != "HEAD" else b""
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def _json(self, document: object) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        # Split before decoding: a revision may hold an encoded `/` (refs%2Fpr%2F1).
        parts = [urllib.parse.unquote(part) for part in url.path.lstrip("/").split("/")]
        self.on_request("/" + "/".join(parts))
        token = self.required_token()
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            return self._error(401, "GatedRepo", "Access to this repo is restricted: send a token")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self._api(parts[2:], urllib.parse.parse_qs(url.query))
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
        return self._error(404, "EntryNotFound", f"no such endpoint: {url.path}")

    def _repo_at(self, name: str, revision: str) -> Repo | None:
        """The repo at a revision, or None with the error answered."""
        repo = self.server.source.repo(name)
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository {name} not found")
            return None
        if revision not in ("main", repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo

    def _api(self, parts: list[str], query: dict[str, list[str]]) -> None:
        name = "/".join(parts[:2])
        kind = parts[2] if len(parts) > 2 else "revision"
        revision = parts[3] if len(parts) > 3 else "main"
        if kind not in ("revision", "tree") or (kind == "revision" and len(parts) > 4):
            return self._error(404, "EntryNotFound", f"no such endpoint for {name}: {kind}")
        repo = self._repo_at(name, revision)
        if repo is None:
            return None
        if kind == "revision":
            siblings = [{"rfilename": path} for path in sorted(repo.files)]
            return self._json({"id": name, "sha": repo.commit, "private": False,
                               "siblings": siblings})  # fmt: skip
        folder = "/".join(parts[4:]).strip("/")
        recursive = query.get("recursive", ["false"])[-1].lower() in ("1", "true")
        entries = tree_entries(repo, folder, recursive)
        if entries is None:
            return self._error(404, "EntryNotFound", f"{folder} does not exist in {name}")
        return self._json(entries)

    def _resolve(self, name: str, revision: str, path: str, head: bool) -> None:
        repo = self._repo_at(name, revision)
        if repo is None:
            return None
        file = repo.files.get(path)
        if file is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist in {name}")
        forced = self.forced_status(path)
        if forced is not None:
            # As a proxy in between would fail: no body.
            return self._error(forced, "Injected", f"status {forced} for {path}", body=False)
        try:
            wanted = byte_range(self.headers.get("Range"), file.size)
        except RangeNotSatisfiable:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{file.size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        start, end = wanted or (0, file.size)
        omit = self.omit_length(path) and not head
        self.send_response(206 if wanted else 200)
        if omit:
            # No length: the body ends when the connection closes.
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(end - start))
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("X-Linked-Size", str(file.size))
        self.send_header("X-Linked-Etag", f'"{file.etag}"')
        self.send_header("ETag", f'"{file.etag}"')
        self.send_header("Accept-Ranges", "bytes")
        if wanted and not omit:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{file.size}")
        self.end_headers()
        if head:
            return None
        try:
            self.send_file_body(name, path, file, start, end)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except FileChanged as exc:
            print(f"hub: {exc}", file=sys.stderr)
            self.close_connection = True
        return None


class RangeNotSatisfiable(ValueError):
    """A `Range` that starts past the end of the file (answered 416)."""


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The [start, end) a `Range` header asks of a file: None for the whole file (no header,
    or one this hub does not honour, such as several ranges); RangeNotSatisfiable past the end."""
    if not header:
        return None
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if match is None or match[1] == match[2] == "":
        return None
    if match[1] == "":
        suffix = int(match[2])
        if not suffix or not size:
            raise RangeNotSatisfiable(header)
        return max(size - suffix, 0), size
    start = int(match[1])
    end = min(int(match[2]) + 1, size) if match[2] else size
    if start >= size or end <= start:
        raise RangeNotSatisfiable(header)
    return start, end


def tree_entries(repo: Repo, folder: str, recursive: bool) -> list[dict[str, Any]] | None:
    """The tree listing of a folder (`""`: the repo's root), None when there is no such folder."""
    prefix = f"{folder}/" if folder else ""
    inside = {path[len(prefix) :]: file for path, file in repo.files.items()
              if path.startswith(prefix)}  # fmt: skip
    if folder and not inside:
        return None
    folders = {
        "/".join(rest.split("/")[:depth])
        for rest in inside
        for depth in range(1, rest.count("/") + 1)
    }
    entries: list[dict[str, Any]] = []
    for sub in sorted(folders):
        if recursive or "/" not in sub:
            oid = hashlib.sha1(f"{repo.commit}:{prefix}{sub}".encode(), usedforsecurity=False)
            entries.append(
                {"type": "directory", "path": prefix + sub, "oid": oid.hexdigest(), "size": 0}
            )
    for rest, file in sorted(inside.items()):
        if not recursive and "/" in rest:
            continue
        entry: dict[str, Any] = {
            "type": "file",
            "path": prefix + rest,
            "size": file.size,
            "oid": file.git_oid,
        }
        if file.lfs:
            pointer = lfs_pointer(file.sha256, file.size)
            entry["lfs"] = {"oid": file.sha256, "size": file.size, "pointerSize": len(pointer)}
        entries.append(entry)
    return entries
