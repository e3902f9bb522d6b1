"""Pure builders of a llama-server's monitoring objects on Kubernetes.

The metrics-only proxy beside the server (the port scrapers reach), prometheus-operator's
ServiceMonitor (or PodMonitor) and PrometheusRule, a ConfigMap that Grafana's dashboard sidecar
picks up by its `grafana_dashboard` label, and the pod annotations a plain Prometheus's
`kubernetes-pods` job scrapes by.
"""

import functools
import hashlib
from typing import Any

from components.k8s.metadata import Meta, config_map, object_head
from components.k8s.pod_security import restricted_container
from components.monitoring.dashboard import dashboard_json
from components.monitoring.inputs import KubernetesMonitoring
from components.monitoring.queries import METRICS_PATH, MonitoringSpec, rule_groups
from components.payloads import METRICS_PROXY_MOUNT, METRICS_PROXY_SOURCE
from components.payloads.metrics_proxy import API_KEY_ENV

JOB_LABEL = "app.kubernetes.io/instance"
"""The server label whose value becomes the `job` of its series (the monitor's jobLabel)."""
MONITORING_API = "monitoring.coreos.com/v1"
DASHBOARD_LABEL = "grafana_dashboard"


METRICS_PORT_NAME = "metrics"
"""The proxy's container and Service port: what the monitors and the NetworkPolicy name."""
_PROXY_FILE = "metrics_proxy.py"


def metrics_port(monitoring: KubernetesMonitoring) -> int:
    """The port scrapers reach: the metrics proxy's."""
    return monitoring["port"]


def metrics_proxy_config_map_name(server: str, source: str) -> str:
    """The proxy script's ConfigMap: immutable, named after its content, so a changed script
    is a new ConfigMap and a new pod rather than an edit a running proxy never sees."""
    return f"{server}-metrics-proxy-{hashlib.sha256(source.encode()).hexdigest()[:10]}"


def metrics_proxy_config_map(server: Meta, source: str) -> dict[str, Any]:
    """The proxy script, for the stock Python image of the model check; in the server's
    namespace, with its labels."""
    meta = server.named(metrics_proxy_config_map_name(server.name, source))
    return config_map(meta, {_PROXY_FILE: source}, immutable=True)


def metrics_proxy_container(
    monitoring: KubernetesMonitoring,
    *,
    image: str,
    server_port: int,
    api_key_secret: tuple[str, str] | None,
    run_as_user: int,
) -> dict[str, Any]:
    """The metrics-only proxy beside llama-server: `GET /metrics` on its own port, from the
    server on loopback, with the API key (when set) from the server's Secret."""
    port = metrics_port(monitoring)
    command = [
        "python3", f"{METRICS_PROXY_MOUNT}/{_PROXY_FILE}",
        "--port", str(port), "--upstream-port", str(server_port),
    ]  # fmt: skip
    env: list[dict[str, Any]] = [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]
    if api_key_secret is not None:
        secret, key = api_key_secret
        # From the environment, like the verify Job: the Secret's files are root's, mode 0400.
        env.append(
            {"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        )
    mounts = [{"name": "metrics-proxy", "mountPath": METRICS_PROXY_MOUNT, "readOnly": True}]
    alive = {"tcpSocket": {"port": METRICS_PORT_NAME}, "periodSeconds": 10, "timeoutSeconds": 2}
    return {
        "name": "metrics-proxy",
        "image": image,
        "command": command,
        "env": env,
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"},
        },
        "readinessProbe": alive,
        "livenessProbe": {**alive, "failureThreshold": 6},
        "securityContext": restricted_container(run_as_user),
        "volumeMounts": mounts,
    }


def metrics_proxy_volume(server: str, source: str) -> dict[str, Any]:
    """The pod volume holding the proxy script."""
    return {
        "name": "metrics-proxy",
        "configMap": {
            "name": metrics_proxy_config_map_name(server, source),
            "defaultMode": 0o444,
        },
    }


@functools.cache
def proxy_source() -> str:
    """The proxy script shipped in the ConfigMap (read once: the Deployment and the ConfigMap
    of every server name it)."""
    return METRICS_PROXY_SOURCE.read_text()


def scrape_annotations(port: int) -> dict[str, str]:
    """The `prometheus.io/*` annotations of the server pod (for a Prometheus without the
    operator): the metrics proxy's port, which needs no credential."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": METRICS_PATH,
    }


def service_monitor(
    meta: Meta, selector: dict[str, str], monitoring: KubernetesMonitoring
) -> dict[str, Any]:
    """A ServiceMonitor (or PodMonitor) that scrapes the metrics proxy's port at /metrics (no
    credential: the proxy holds the API key, the NetworkPolicy says who may scrape)."""
    kind = monitoring.get("monitor_kind") or "ServiceMonitor"
    interval = monitoring["scrape_interval_seconds"]
    endpoint: dict[str, Any] = {
        "port": METRICS_PORT_NAME,
        "path": METRICS_PATH,
        "interval": f"{interval}s",
        "scrapeTimeout": f"{min(interval, 10)}s",
    }
    endpoints = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    return {
        **object_head(MONITORING_API, kind, meta.labelled(monitoring["monitor_labels"])),
        "spec": {
            "jobLabel": JOB_LABEL,
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [meta.namespace]},
            endpoints: [endpoint],
        },
    }


def prometheus_rule(
    meta: Meta, spec: MonitoringSpec, monitoring: KubernetesMonitoring
) -> dict[str, Any]:
    """The server's alerts as a PrometheusRule."""
    return {
        **object_head(
            MONITORING_API, "PrometheusRule", meta.labelled(monitoring["monitor_labels"])
        ),
        "spec": {"groups": rule_groups("llama-server", spec)},
    }


def dashboard_config_map(meta: Meta, spec: MonitoringSpec) -> dict[str, Any]:
    """The Grafana dashboard in a ConfigMap for Grafana's sidecar (label `grafana_dashboard`)."""
    data = {f"{meta.name}.json": dashboard_json("llama-server", spec)}
    return config_map(meta.labelled({DASHBOARD_LABEL: "1"}), data)
