"""A metrics-only proxy beside llama-server: `GET /metrics` on a port of its own, nothing else.

A NetworkPolicy admits ports, not paths, and llama-server serves `/metrics` on its API port
behind the same key as the API. Scrapers are admitted to this proxy's port instead: it answers
`/metrics` from the server on loopback and 404 for every other path (the API is never reached
through it), never forwards a client's headers, and keeps the API key (from the environment,
a Kubernetes Secret) inside the pod. Scrapers need no credential of their own: the
NetworkPolicy names who they are.

Bounded against slow and many peers: a client must send its whole request head (request line
and headers) within HEAD_DEADLINE_S of connecting, whatever it trickles (a byte every few
seconds included), and at most MAX_CONNECTIONS clients are served at once; a connection past
the cap is closed at once, before anything is read.

Stdlib only: it runs in the stock Python image of the model check.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

METRICS_PATH = "/metrics"
API_KEY_ENV = "LLM_INFRA_API_KEY"
"""The API key llama-server demands on /metrics too (unset: the server has none)."""
BODY_LIMIT = 16 * 2**20
"""A llama-server exposition is a few KiB; a larger answer is not metrics."""
UPSTREAM_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 15.0
"""The longest wait for any byte of a client's request."""
HEAD_DEADLINE_S = 10.0
"""The whole request head (request line and headers), from the connect."""
MAX_CONNECTIONS = 32
"""Clients served at once (a few scrapers scrape every few seconds)."""


class TooLarge(Exception):
    """The upstream's answer is larger than BODY_LIMIT."""


class MetricsProxy(ThreadingHTTPServer):
    """Serves GET /metrics from llama-server on 127.0.0.1:`upstream_port`."""

    daemon_threads = True

    def __init__(
        self,
        port: int,
        upstream_port: int,
        api_key: str | None,
        *,
        head_deadline_s: float = HEAD_DEADLINE_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.upstream_port = upstream_port
        self.api_key = api_key
        self.head_deadline_s = head_deadline_s
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(("", port), Handler)

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        """A thread per client while a slot is free; past the cap the connection is closed."""
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def upstream_headers(self) -> dict[str, str]:
        """The headers of the request to llama-server: the key, and nothing of the client's."""
        headers = {"Accept": "text/plain"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


class Handler(BaseHTTPRequestHandler):
    server: MetricsProxy
    server_version = "llm-infra-metrics-proxy"
    sys_version = ""
    timeout = CLIENT_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        # The head's deadline: past it the socket is shut, which ends any read in progress.
        self._deadline = threading.Timer(self.server.head_deadline_s, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self._deadline.cancel()
        return parsed

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != METRICS_PATH:
            self._answer(404, b"only GET /metrics is served on this port\n")
            return
        try:
            status, content_type, body = self._fetch()
        except TooLarge:
            self._answer(502, f"llama-server's answer exceeds {BODY_LIMIT} bytes\n".encode())
            return
        except (OSError, http.client.HTTPException) as error:
            self._answer(502, f"llama-server did not answer: {type(error).__name__}\n".encode())
            return
        if status != 200:
            self._answer(502, f"llama-server answered {status}\n".encode())
            return
        self._answer(200, body, content_type)

    def _fetch(self) -> tuple[int, str, bytes]:
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.server.upstream_port, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            connection.request("GET", METRICS_PATH, headers=self.server.upstream_headers())
            response = connection.getresponse()
            body = response.read(BODY_LIMIT + 1)
            if len(body) > BODY_LIMIT:
                raise TooLarge
            content_type = response.getheader("Content-Type") or "text/plain; version=0.0.4"
            return response.status, content_type, body
        finally:
            connection.close()

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Scrapes every few seconds would flood the pod log; failures are the scraper's to see.
        return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve llama-server's GET /metrics, nothing else.")
    parser.add_argument("--port", type=int, required=True, help="port the scrapers reach")
    parser.add_argument(
        "--upstream-port", type=int, required=True, help="llama-server's port on 127.0.0.1"
    )
    options = parser.parse_args(argv)
    api_key = os.environ.get(API_KEY_ENV) or None
    proxy = MetricsProxy(options.port, options.upstream_port, api_key)
    print(
        f"metrics-proxy: GET {METRICS_PATH} on :{options.port} from 127.0.0.1:"
        f"{options.upstream_port}{' with the API key' if api_key else ''}",
        flush=True,
    )
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
