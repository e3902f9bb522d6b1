"""Loopback HTTP peers for the client policy's tests: a raw-socket server whose answer is a
script (so it can misbehave in ways http.server cannot), and a two-host stand-in where one
address redirects to the other.

Every request's method, path and headers are kept, so a test can check which host saw a
credential. Loopback only: 127.0.0.1 and 127.0.0.2 are both this machine on Linux.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Seen:
    """One request as the peer received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


Script = Callable[[socket.socket, Seen], None]
"""Writes the answer to one request (the connection is closed after it)."""


@dataclass
class Peer:
    """A running peer: its base URL and what it received."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    sent: int = 0

    def authorizations(self) -> list[str | None]:
        """The Authorization header of each request (None where none came)."""
        return [s.headers.get("authorization") for s in self.seen]


def _read_request(conn: socket.socket) -> Seen | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Seen(method, path, headers, rest)


@contextlib.contextmanager
def serve(script: Script, host: str = "127.0.0.1") -> Iterator[Peer]:
    """Run `script` for every connection to host:port (a free port) during the block."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, 0))
    listener.listen(16)
    listener.settimeout(0.05)  # how soon the accept loop sees `stop`
    peer = Peer(url=f"http://{host}:{listener.getsockname()[1]}")
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                seen = _read_request(conn)
                if seen is None:
                    return
                peer.seen.append(seen)
                script(conn, seen)
            except OSError:
                pass  # the client gave up: that is what most scripts are for

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def answer(
    status: int = 200,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> Script:
    """A well-formed answer with a Content-Length."""

    def script(conn: socket.socket, seen: Seen) -> None:
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        conn.sendall(head.encode() + b"\r\n" + body)

    return script


def redirect(to: Callable[[Seen], str], status: int = 302) -> Script:
    """A redirect to the URL `to` gives for the request."""

    def script(conn: socket.socket, seen: Seen) -> None:
        answer(status, headers={"Location": to(seen)})(conn, seen)

    return script


def endless_body(line: bytes = b"0" * 65536, sse: bool = False, peer: Peer | None = None) -> Script:
    """A 200 with no length that never ends (until the client hangs up)."""

    def script(conn: socket.socket, seen: Seen) -> None:
        kind = "text/event-stream" if sse else "application/json"
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n\r\n".encode())
        if sse:
            conn.sendall(b"data: ")
        while True:
            conn.sendall(line)
            if peer is not None:
                peer.sent += len(line)

    return script


def truncated_chunk(body: bytes = b'{"data": [') -> Script:
    """A chunked body whose chunk promises more bytes than come before the close."""

    def script(conn: socket.socket, seen: Seen) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(body) + 100:x}\r\n".encode()
            + body
        )

    return script


def huge_header() -> Script:
    """One header line far longer than any client should read."""

    def script(conn: socket.socket, seen: Seen) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")

    return script


def many_headers(count: int = 500) -> Script:
    """More header lines than a client accepts."""

    def script(conn: socket.socket, seen: Seen) -> None:
        lines = "".join(f"X-{i}: {i}\r\n" for i in range(count))
        conn.sendall(f"HTTP/1.1 200 OK\r\n{lines}\r\n".encode())

    return script


def bad_status_line() -> Script:
    """Something that is not HTTP."""

    def script(conn: socket.socket, seen: Seen) -> None:
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    return script


def slowloris(head: bool, every_s: float = 0.05) -> Script:
    """One byte at a time, for ever: in the headers (head) or in a body with a length."""

    def script(conn: socket.socket, seen: Seen) -> None:
        if head:
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
        while True:
            conn.sendall(b"a")
            time.sleep(every_s)

    return script
