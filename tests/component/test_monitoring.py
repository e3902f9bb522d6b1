"""The monitoring objects and files of both stacks, as the program registers them under mocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.render import Rendered
from tests.support.stack_edits import DELETE, SECRETS, Edit, rendered


def objects(result: Rendered) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in result.resources}


def container(result: Rendered) -> dict[str, Any]:
    deployment = objects(result)["deepseek-v4-flash-0731-deployment"]["inputs"]
    spec: dict[str, Any] = deployment["spec"]["template"]
    return spec


def test_metrics_add_resources_and_rename_none(tmp_path: Path) -> None:
    off = objects(rendered("strix-halo", [("metrics", "", {"enabled": False})], tmp_path))
    on = objects(rendered("strix-halo", [], tmp_path))
    assert set(on) - set(off) == {
        "deepseek-v4-flash-0731-metrics-proxy",
        "deepseek-v4-flash-0731-monitor",
        "deepseek-v4-flash-0731-alerts",
        "deepseek-v4-flash-0731-dashboard",
    }
    assert {name: r["type"] for name, r in off.items()} == {name: on[name]["type"] for name in off}


def test_without_metrics_the_server_exports_nothing_and_admits_no_scraper(tmp_path: Path) -> None:
    result = rendered("strix-halo", [("metrics", "", {"enabled": False})], tmp_path)
    template = container(result)
    assert "--metrics" not in template["spec"]["containers"][0]["args"]
    assert "annotations" not in template["metadata"]
    policy = objects(result)["deepseek-v4-flash-0731-ingress"]["inputs"]
    assert len(policy["spec"]["ingress"]) == 1


def test_scrapers_reach_only_the_metrics_proxy_port_from_their_namespace(tmp_path: Path) -> None:
    scrapers = [{"namespace": "observability", "podLabels": {"app": "prometheus"}}]
    edits: list[Edit] = [("metrics", "scrapers", scrapers), ("metrics", "port", 9100)]
    result = rendered("strix-halo", edits, tmp_path)
    template = container(result)
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics",
    }
    policy = objects(result)["deepseek-v4-flash-0731-ingress"]["inputs"]
    api, scrape = policy["spec"]["ingress"]
    # The API port admits the API's clients only; the scrapers get the proxy's port.
    assert api["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert "observability" not in json.dumps(api["from"])
    assert scrape == {
        "from": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "observability"}
                },
                "podSelector": {"matchLabels": {"app": "prometheus"}},
            }
        ],
        "ports": [{"port": 9100, "protocol": "TCP"}],
    }
    proxy = template["spec"]["containers"][1]
    assert proxy["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]


def test_with_an_api_key_the_monitor_sends_no_credential_and_the_proxy_holds_the_key(
    tmp_path: Path,
) -> None:
    result = rendered("strix-halo", [("server", "apiKey", True)], tmp_path, secrets=True)
    monitor = objects(result)["deepseek-v4-flash-0731-monitor"]["inputs"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert "authorization" not in endpoint and "api-key" not in json.dumps(monitor)
    proxy = container(result)["spec"]["containers"][1]
    assert {"name": "LLM_INFRA_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "deepseek-v4-flash-0731-api-key", "key": "api-key"}}} in proxy["env"]  # fmt: skip
    assert SECRETS["llm-infra:apiKey"] not in json.dumps(result.resources)


def test_a_pod_monitor_with_the_selector_labels_of_prometheus(tmp_path: Path) -> None:
    edits: list[Edit] = [
        ("metrics", "monitorKind", "PodMonitor"),
        ("metrics", "monitorLabels", {"release": "kube-prometheus-stack"}),
    ]
    result = objects(rendered("strix-halo", edits, tmp_path))
    monitor = result["deepseek-v4-flash-0731-monitor"]
    assert monitor["type"] == "kubernetes:monitoring.coreos.com/v1:PodMonitor"
    assert monitor["inputs"]["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"
    assert monitor["inputs"]["spec"]["jobLabel"] == "app.kubernetes.io/instance"
    for name in ("monitor", "alerts"):
        labels = result[f"deepseek-v4-flash-0731-{name}"]["inputs"]["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack"


def test_the_dashboard_goes_where_grafana_looks_with_the_stack_figures(tmp_path: Path) -> None:
    edits: list[Edit] = [
        ("metrics", "dashboardNamespace", "grafana"),
        ("metrics", "reference", {"decodeTps": 20, "aggregateTps": {4: 55}}),
        ("server", "minDecodeTps", 12),
    ]
    board = objects(rendered("strix-halo", edits, tmp_path))["deepseek-v4-flash-0731-dashboard"]
    metadata = board["inputs"]["metadata"]
    assert (metadata["namespace"], metadata["labels"]["grafana_dashboard"]) == ("grafana", "1")
    (text,) = board["inputs"]["data"].values()
    panels = {p["title"]: p for p in json.loads(text)["panels"]}
    steps = panels["Decode tok/s per stream"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 12, 20]
    aggregate = panels["Generated tok/s, all streams"]["fieldConfig"]["defaults"]["thresholds"]
    assert [s["value"] for s in aggregate["steps"]] == [None, 55]
    assert "TTFT" in panels["Time to first token"]["options"]["content"]


def test_the_decode_floor_alert_exists_only_with_a_floor(tmp_path: Path) -> None:
    def alerts(edits: list[Edit]) -> list[str]:
        rule = objects(rendered("strix-halo", edits, tmp_path))["deepseek-v4-flash-0731-alerts"]
        return [r["alert"] for r in rule["inputs"]["spec"]["groups"][0]["rules"]]

    assert "LlmDecodeBelowFloor" not in alerts([])
    assert "LlmDecodeBelowFloor" in alerts([("server", "minDecodeTps", 12)])


def test_mi300x_without_metrics_has_no_metrics_site(tmp_path: Path) -> None:
    result = rendered("mi300x", [("metrics", "", None)], tmp_path)
    caddyfile = result.files["/opt/llm/Caddyfile"].decode()
    assert ":9443" not in caddyfile and "/metrics" not in caddyfile.split("@not_api", 1)[1]
    compose = yaml.safe_load(result.files["/opt/llm/compose.yaml"])
    assert compose["services"]["caddy"]["ports"] == ["80:80", "443:443", "443:443/udp"]
    assert not [path for path in result.files if "/monitoring/" in path]


def test_mi300x_metrics_site_publishes_its_port_and_writes_the_monitoring_files(
    tmp_path: Path,
) -> None:
    result = rendered("mi300x", [], tmp_path)
    compose = yaml.safe_load(result.files["/opt/llm/compose.yaml"])
    assert compose["services"]["caddy"]["ports"][-1] == "9443:9443"
    assert "gpu-exporter" not in compose["services"]
    assert "llm.example.com:9443 {" in result.files["/opt/llm/Caddyfile"].decode()
    scrape = yaml.safe_load(result.files["/opt/llm/monitoring/scrape.yml"])
    assert scrape["scrape_configs"] == [
        {
            "job_name": "deepseek-v4-flash-0731",
            "scheme": "https",
            "metrics_path": "/metrics",
            "scrape_interval": "30s",
            "static_configs": [{"targets": ["llm.example.com:9443"]}],
        }
    ]
    board = json.loads(result.files["/opt/llm/monitoring/dashboard.json"])
    titles = {p["title"] for p in board["panels"]}
    assert {"Draft acceptance rate", "Accepted tokens per draft", "KV cache use"} <= titles
    assert "GPU junction temperature" not in titles
    copies = {r["name"] for r in result.resources if r["type"] == "command:remote:CopyToRemote"}
    assert {"vllm-dashboard", "vllm-alerts", "vllm-scrape"} <= copies


@pytest.mark.parametrize("tls", ["internal"])
def test_the_gpu_exporter_joins_compose_the_site_and_the_dashboard(
    tls: str, tmp_path: Path
) -> None:
    edits: list[Edit] = [
        ("metrics", "gpuExporter", {"image": "rocm/device-metrics-exporter:v1.2.1"}),
        ("caddy", "site", "203.0.113.10"),
        ("caddy", "tls", tls),
        ("caddy", "acmeEmail", DELETE),
    ]
    result = rendered("mi300x", edits, tmp_path)
    compose = yaml.safe_load(result.files["/opt/llm/compose.yaml"])
    exporter = compose["services"]["gpu-exporter"]
    assert exporter["image"] == "rocm/device-metrics-exporter:v1.2.1"
    assert "ports" not in exporter and exporter["expose"] == ["5000"]
    assert "reverse_proxy @gpu gpu-exporter:5000" in result.files["/opt/llm/Caddyfile"].decode()
    scrape = yaml.safe_load(result.files["/opt/llm/monitoring/scrape.yml"])["scrape_configs"]
    assert [(job["job_name"], job["metrics_path"]) for job in scrape] == [
        ("deepseek-v4-flash-0731", "/metrics"), ("deepseek-v4-flash-0731-gpu", "/gpu/metrics"),
    ]  # fmt: skip
    assert scrape[0]["tls_config"] == {"ca_file": "caddy-root.crt", "server_name": "203.0.113.10"}
    board = json.loads(result.files["/opt/llm/monitoring/dashboard.json"])
    titles = {p["title"] for p in board["panels"]}
    assert {"GPU junction temperature", "GPU package power", "GPU memory used"} <= titles
