"""The metrics proxy against a stand-in llama-server on loopback: what it forwards, what it
refuses, and how it fails. The real llama-server behind it:
tests/contract/test_metrics_prometheus.py."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from components.payloads.metrics_proxy import BODY_LIMIT, MetricsProxy
from tests.support.llama_server import free_port

KEY = "sk-proxy-test-key"
EXPOSITION = b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"


class Upstream(BaseHTTPRequestHandler):
    """Answers like llama-server with --metrics and an API key, or as a test sets it."""

    seen: ClassVar[list[tuple[str, dict[str, str]]]] = []
    body: ClassVar[bytes] = EXPOSITION

    def do_GET(self) -> None:
        Upstream.seen.append((self.path, dict(self.headers.items())))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(Upstream.body)))
        self.end_headers()
        self.wfile.write(Upstream.body)

    def log_message(self, format: str, *args: object) -> None:
        return


def serving(server: ThreadingHTTPServer) -> threading.Thread:
    # Polls for shutdown() every 50 ms, not serve_forever's default 0.5 s.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return thread


@pytest.fixture
def upstream() -> Iterator[int]:
    Upstream.seen, Upstream.body = [], EXPOSITION
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    serving(server)
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def proxy_url(upstream_port: int, key: str | None = KEY) -> Iterator[str]:
    proxy = MetricsProxy(free_port(), upstream_port, key)
    serving(proxy)
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture
def proxy(upstream: int) -> Iterator[str]:
    yield from proxy_url(upstream)


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_metrics_are_fetched_with_the_key_and_none_of_the_clients_headers(proxy: str) -> None:
    headers = {"Authorization": "Bearer scraper-token", "Cookie": "session=1", "X-Evil": "1"}
    assert get(f"{proxy}/metrics", headers) == (200, EXPOSITION)
    ((path, sent),) = Upstream.seen
    assert path == "/metrics"
    assert sent["Authorization"] == f"Bearer {KEY}"
    assert "Cookie" not in sent and "X-Evil" not in sent


def test_every_other_path_is_404_and_never_reaches_the_server(proxy: str) -> None:
    for path in (
        "/",
        "/v1/models",
        "/health",
        "/metrics/",
        "/metrics/../v1/models",
        "/v1//metrics",
    ):
        assert get(proxy + path)[0] == 404, path
    assert get(f"{proxy}/v1/chat/completions", method="POST")[0] == 501
    assert Upstream.seen == []


def test_a_server_that_refuses_the_key_is_a_502_naming_its_answer(upstream: int) -> None:
    for url in proxy_url(upstream, key="sk-wrong"):
        status, body = get(f"{url}/metrics")
        assert (status, body) == (502, b"llama-server answered 401\n")


def test_an_answer_larger_than_the_limit_is_a_502_not_relayed(proxy: str) -> None:
    Upstream.body = b"x" * (BODY_LIMIT + 1)
    assert get(f"{proxy}/metrics") == (
        502,
        f"llama-server's answer exceeds {BODY_LIMIT} bytes\n".encode(),
    )


def test_a_server_that_is_not_listening_is_a_502() -> None:
    for url in proxy_url(free_port()):
        status, body = get(f"{url}/metrics")
        assert status == 502 and body.startswith(b"llama-server did not answer")


def limited_proxy(upstream_port: int, **bounds: Any) -> Iterator[MetricsProxy]:
    proxy = MetricsProxy(free_port(), upstream_port, KEY, **bounds)
    serving(proxy)
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def connect(proxy: MetricsProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.server_address[1]), timeout=10)


def test_a_client_trickling_its_request_head_is_cut_at_the_head_deadline(upstream: int) -> None:
    for proxy in limited_proxy(upstream, head_deadline_s=1.0):
        with connect(proxy) as client:
            started = time.monotonic()
            cut = None
            # A byte every 0.2 s: each read is quick, the head never ends.
            for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                try:
                    client.send(bytes([byte]))
                    time.sleep(0.2)
                    client.settimeout(0.01)
                    if client.recv(1) == b"":
                        cut = time.monotonic() - started
                        break
                except TimeoutError:
                    continue
                except OSError:
                    cut = time.monotonic() - started
                    break
            assert cut is not None and 0.9 < cut < 3.0, cut
    assert Upstream.seen == []


def test_connections_past_the_cap_are_closed_and_the_slots_come_back(upstream: int) -> None:
    for proxy in limited_proxy(upstream, head_deadline_s=3.0, max_connections=4):
        clients = [connect(proxy) for _ in range(10)]
        time.sleep(0.3)
        closed = 0
        for client in clients:
            client.settimeout(0.1)
            with contextlib.suppress(TimeoutError):  # a timeout: held, waiting for a head
                closed += client.recv(1) == b""
        assert closed == 6
        for client in clients:
            client.close()
        time.sleep(3.5)  # the held ones reach their deadline
        status, body = get(f"http://127.0.0.1:{proxy.server_address[1]}/metrics")
        assert status == 200 and body == EXPOSITION
