"""A real Prometheus scrapes a real llama-server b11434 with the rendered settings.

The strix-halo stack is rendered (with a 1 s scrape interval and a decode floor no CPU reaches);
llama-server runs with the Deployment's argv (`--metrics` included; only `-m`, `--threads`,
`--port` and `--log-file` moved to this machine), the rendered metrics proxy runs in front of
it as its container would, and Prometheus scrapes the proxy as prometheus-operator would from
the rendered ServiceMonitor (its port, path, interval, timeout and jobLabel; the `namespace`
label the operator adds) with the rendered PrometheusRule loaded.
After a few requests, every dashboard query and every alert's signals must return data.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.llamacpp.manifests import api_key_secret
from components.llamacpp.monitoring import monitoring_spec
from components.monitoring.dashboard import panel_queries
from components.monitoring.manifests import JOB_LABEL
from components.monitoring.queries import MonitoringSpec, alert_rules
from infra import program
from infra.config import KubernetesStack, read_stack_file
from infra.config.feeds import fed
from infra.render import run_program
from infra.targets.kubernetes import server_args
from tests.conftest import ROOT, stack_values, unlocked_source
from tests.support.llama_server import free_port, replace_value, run_llama_server
from tests.support.metrics_proxy import run_rendered_proxy
from tests.support.prometheus import LivePrometheus, run_prometheus
from tests.support.render import render
from tests.support.tiny_gguf import write_tiny_split_model

UNREACHABLE_FLOOR = 1_000_000
# Only kube-state-metrics reports Jobs; none runs here (promtool's unit tests cover the rule).
NEEDS_KUBE_STATE_METRICS = {"LlmModelFetchFailed"}
KEY = "sk-test-metrics-0123456789"


@dataclass
class Scraped:
    """The rendered objects, the live Prometheus, and the stopper of the server it scrapes."""

    documents: list[dict[str, Any]]
    stack_file: Path
    prometheus: LivePrometheus
    stop_server: Any

    def kind(self, kind: str) -> dict[str, Any]:
        return next(d for d in self.documents if d["kind"] == kind)


def rendered_documents(tmp_path: Path) -> tuple[list[dict[str, Any]], Path]:
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    text = text.replace(
        "    gpuGate: true\n", f"    gpuGate: true\n    minDecodeTps: {UNREACHABLE_FLOOR}\n"
    )
    text = text.replace(
        "    serviceMonitor: true\n", "    serviceMonitor: true\n    scrapeIntervalSeconds: 1\n"
    )
    stack = tmp_path / "Pulumi.strix-halo.yaml"
    stack.write_text(text)
    out = tmp_path / "render"
    result = render(str(stack), out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all((out / "manifests.yaml").read_text())), stack


def scrape_config(documents: list[dict[str, Any]], target: str) -> dict[str, Any]:
    """What prometheus-operator generates from the ServiceMonitor, pointed at the local server."""
    monitor = next(d for d in documents if d["kind"] == "ServiceMonitor")
    service = next(d for d in documents if d["kind"] == "Service")
    (endpoint,) = monitor["spec"]["endpoints"]
    # The monitor scrapes the Service's metrics port (the proxy's), not the API port.
    assert endpoint["port"] == "metrics"
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["port"] != service["spec"]["ports"][0]["name"]
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    return {
        "global": {"evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": endpoint["path"],
                "scrape_interval": endpoint["interval"],
                "scrape_timeout": endpoint["scrapeTimeout"],
                "static_configs": [
                    {"targets": [target], "labels": {"namespace": monitor["metadata"]["namespace"]}}
                ],
            }
        ],
    }


def chat(base_url: str, prompt: str) -> None:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 24}
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    tmp_path = tmp_path_factory.mktemp("metrics")
    documents, stack_file = rendered_documents(tmp_path)
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    rendered: list[str] = container["args"]
    assert "--metrics" in rendered
    name = Path(rendered[rendered.index("-m") + 1]).name
    shards = write_tiny_split_model(tmp_path / "models", name.rsplit("-00001-of-", 1)[0], shards=3)
    argv = replace_value(rendered, "-m", str(shards[0]))
    argv = replace_value(argv, "--threads", str(min(os.cpu_count() or 1, 2)))
    argv = replace_value(argv, "--port", str(free_port()))
    argv = replace_value(argv, "--log-file", str(tmp_path / "llama-server.log"))
    port = argv[argv.index("--port") + 1]
    rules = {
        "groups": next(d for d in documents if d["kind"] == "PrometheusRule")["spec"]["groups"]
    }
    config_maps = [d for d in documents if d["kind"] == "ConfigMap"]
    server = run_llama_server(argv, timeout=120.0, log_path=tmp_path / "stderr.log")
    base_url = server.__enter__()
    try:
        with (
            run_rendered_proxy(
                deployment, config_maps, tmp_path / "proxy", upstream_port=int(port)
            ) as proxy_port,
            run_prometheus(
                scrape_config(documents, f"127.0.0.1:{proxy_port}"), rules
            ) as prometheus,
        ):
            live = Scraped(
                documents, stack_file, prometheus, lambda: server.__exit__(None, None, None)
            )
            prometheus.wait_for("up == 1")
            # A repeated prompt: the second time its tokens come from the prompt cache.
            for prompt in ("Tell me about GPUs.", "Tell me about GPUs.", "And memory?"):
                chat(base_url, prompt)
            # Two scrapes after the last request, so every rate sees the increase.
            prometheus.wait_for("increase(llamacpp:tokens_predicted_total[1m]) > 0")
            yield live
    finally:
        server.__exit__(None, None, None)


def dashboard(scraped: Scraped) -> dict[str, Any]:
    config_map = next(
        d
        for d in scraped.documents
        if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]
    )
    (text,) = config_map["data"].values()
    document: dict[str, Any] = json.loads(text)
    return document


def test_the_scrape_reaches_the_rendered_job_and_namespace(scraped: Scraped) -> None:
    (series,) = scraped.prometheus.query("up")
    service = scraped.kind("Service")
    assert series["metric"]["job"] == service["metadata"]["labels"][JOB_LABEL]
    assert series["metric"]["namespace"] == service["metadata"]["namespace"]
    assert float(series["value"][1]) == 1


def test_every_dashboard_query_returns_data_from_llama_server(scraped: Scraped) -> None:
    queries = panel_queries(dashboard(scraped))
    titles = {title for title, _ in queries}
    assert {"Decode tok/s per stream", "Prefill tok/s", "Requests running and waiting",
            "Prompt-cache hits"} <= titles  # fmt: skip
    empty = [(title, expr) for title, expr in queries if not scraped.prometheus.query(expr)]
    assert empty == [], "panels without data (a metric the server does not export?)"


def test_speeds_and_the_cache_hit_rate_are_real_numbers(scraped: Scraped) -> None:
    values = {
        title: float(scraped.prometheus.query(expr)[0]["value"][1])
        for title, expr in panel_queries(dashboard(scraped))
    }
    for title in ("Decode tok/s per stream", "Generated tok/s, all streams", "Prefill tok/s"):
        assert math.isfinite(values[title]) and values[title] > 0, title
    # The repeated prompt was served from the cache: a hit rate strictly between 0 and 1.
    assert 0 < values["Prompt-cache hits"] < 1


def test_every_alert_signal_returns_data_and_every_rule_evaluates(scraped: Scraped) -> None:
    rules = [rule for group in scraped.prometheus.api("rules")["groups"] for rule in group["rules"]]
    rendered = scraped.kind("PrometheusRule")["spec"]["groups"][0]["rules"]
    assert sorted(r["name"] for r in rules) == sorted(r["alert"] for r in rendered)
    assert {r["name"]: r["health"] for r in rules} == {r["name"]: "ok" for r in rules}
    spec_rules = {rule.name: rule for rule in alert_rules("llama-server", spec_of(scraped))}
    assert {r["alert"]: r["expr"] for r in rendered} == {n: r.expr for n, r in spec_rules.items()}
    evaluated = []
    for name, rule in spec_rules.items():
        if name in NEEDS_KUBE_STATE_METRICS:
            continue
        for signal in rule.signals:
            assert scraped.prometheus.query(signal), f"{name}: no data for {signal}"
        evaluated.append(name)
    assert set(evaluated) == set(spec_rules) - NEEDS_KUBE_STATE_METRICS


def test_the_decode_floor_alert_fires_on_real_data(scraped: Scraped) -> None:
    (result,) = scraped.prometheus.wait_for('ALERTS{alertname="LlmDecodeBelowFloor"}')
    assert result["metric"]["alertstate"] in ("pending", "firing")
    assert result["metric"]["severity"] == "warning"


def test_the_server_down_alert_fires_when_llama_server_stops(scraped: Scraped) -> None:
    assert not scraped.prometheus.query('ALERTS{alertname="LlmServerDown"}')
    scraped.stop_server()
    (result,) = scraped.prometheus.wait_for('ALERTS{alertname="LlmServerDown"}', timeout=30)
    assert result["metric"]["alertstate"] == "pending"  # `for: 5m` has not passed


def spec_of(scraped: Scraped) -> MonitoringSpec:
    """The MonitoringSpec of the rendered server, through the target's own wiring."""
    stack = read_stack_file(scraped.stack_file).stack()
    assert isinstance(stack, KubernetesStack)
    volume = {"claim_name": "", "fetcher_config_map": "", "check_image": "", "run_as_user": 0}
    args = server_args(stack, fed(stack), unlocked_source(stack), volume)  # type: ignore[arg-type]
    # As `deploy` passes it on.
    args["min_decode_tps"] = stack.server.min_decode_tps
    metrics = args.get("metrics")
    assert metrics is not None
    return monitoring_spec(stack.server.resource_name, stack.kubernetes.namespace, args, metrics)


def test_with_an_api_key_prometheus_scrapes_the_proxy_with_no_credential_and_never_the_api(
    tmp_path: Path,
) -> None:
    """llama-server guards /metrics with the key; the proxy holds it, the scrapers do not."""
    values = stack_values("strix-halo")
    values["server"]["apiKey"] = True
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    config = {f"llm-infra:{k}": v for k, v in config.items()}
    config["llm-infra:apiKey"] = KEY
    rendered = run_program(program.main, config, ["llm-infra:apiKey"], stack="strix-halo")
    by_type = {r["type"].rsplit(":", 1)[-1]: r["inputs"] for r in rendered.resources}
    monitor, deployment = by_type["ServiceMonitor"], by_type["Deployment"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert "authorization" not in endpoint
    secret_name, secret_key = api_key_secret(deployment["metadata"]["name"])
    config_maps = [r["inputs"] for r in rendered.resources if r["type"].endswith(":ConfigMap")]
    # The server reads the key from the Secret's file, as its rendered argv says.
    key_file = tmp_path / secret_key
    key_file.write_text(KEY)
    server_argv = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--api-key-file" in server_argv
    model = write_tiny_split_model(tmp_path / "models", "tiny", shards=1)[0]
    port = free_port()
    argv = ["-m", str(model), "--port", str(port), "-c", "2048", "-np", "1", "--threads", "2",
            "--metrics", "--api-key-file", str(key_file)]  # fmt: skip
    secrets = {(secret_name, secret_key): KEY}
    with (
        run_llama_server(argv, timeout=120.0) as base_url,
        run_rendered_proxy(
            deployment, config_maps, tmp_path / "proxy", upstream_port=port, secrets=secrets
        ) as proxy_port,
    ):
        proxy = f"http://127.0.0.1:{proxy_port}"
        scrape = {"metrics_path": endpoint["path"], "scrape_interval": "1s"}
        jobs = [
            {**scrape, "job_name": "proxy", "static_configs": [{"targets": [proxy[7:]]}]},
            {**scrape, "job_name": "direct", "static_configs": [{"targets": [base_url[7:]]}]},
        ]
        with run_prometheus({"scrape_configs": jobs}) as prometheus:
            assert prometheus.wait_for('up{job="proxy"} == 1')
            assert prometheus.wait_for('llamacpp:requests_processing{job="proxy"}')
            # The API port without the key: 401, so a scraper there gets nothing.
            assert prometheus.wait_for('up{job="direct"} == 0')
        # A client's own (wrong) credential is not forwarded: the proxy sends the key.
        assert status(f"{proxy}/metrics", {"Authorization": "Bearer wrong"}) == 200
        # Nothing of the API is reachable through the proxy, with or without a key.
        for path in ("/v1/models", "/health", "/props", "/slots", "/metrics/../v1/models"):
            assert status(proxy + path, {"Authorization": f"Bearer {KEY}"}) == 404, path
        assert status(f"{proxy}/v1/chat/completions", method="POST") == 501
        # The API itself wants the key (what the proxy never lets through).
        assert status(f"{base_url}/v1/chat/completions", method="POST") == 401


def status(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=None)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
