"""Pure builders of a llama-server's monitoring objects on Kubernetes.

prometheus-operator's ServiceMonitor (or PodMonitor) and PrometheusRule, a ConfigMap that
Grafana's dashboard sidecar picks up by its `grafana_dashboard` label, and the pod annotations
a plain Prometheus's `kubernetes-pods` job scrapes by.
"""

from typing import Any

from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.monitoring.dashboard import dashboard_json
from components.monitoring.inputs import KubernetesMonitoring
from components.monitoring.queries import METRICS_PATH, MonitoringSpec, rule_groups

JOB_LABEL = "app.kubernetes.io/instance"
"""The server label whose value becomes the `job` of its series (the monitor's jobLabel)."""
MONITORING_API = "monitoring.coreos.com/v1"
DASHBOARD_LABEL = "grafana_dashboard"


def monitoring_spec(
    name: str, namespace: str, args: LlamaCppVulkanServerArgs, monitoring: KubernetesMonitoring
) -> MonitoringSpec:
    """What the dashboard and the alerts of this server are generated from."""
    flags = args["flags"]
    return {
        "job": name,
        "alias": flags["alias"],
        "namespace": namespace,
        "min_decode_tps": args.get("min_decode_tps"),
        "alerts": monitoring.get("alerts") or {},
        "reference": monitoring.get("reference") or {},
        "slot_context": flags["ctx_size"] // flags["parallel"],
        "fetch_job_pattern": monitoring.get("fetch_job_pattern"),
    }


def scrape_annotations(port: int) -> dict[str, str]:
    """The `prometheus.io/*` annotations of the server pod (for a Prometheus without the operator).

    With an API key the scrape needs a bearer token, which annotations cannot carry.
    """
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": METRICS_PATH,
    }


def _metadata(name: str, namespace: str, labels: dict[str, str], extra: dict[str, str]) -> Any:
    return {"name": name, "namespace": namespace, "labels": {**labels, **extra}}


def service_monitor(
    name: str,
    namespace: str,
    labels: dict[str, str],
    selector: dict[str, str],
    monitoring: KubernetesMonitoring,
    api_key_secret: tuple[str, str] | None,
) -> dict[str, Any]:
    """A ServiceMonitor (or PodMonitor) that scrapes the server's `http` port at /metrics."""
    kind = monitoring.get("monitor_kind") or "ServiceMonitor"
    interval = monitoring.get("scrape_interval_seconds", 30)
    endpoint: dict[str, Any] = {
        "port": "http",
        "path": METRICS_PATH,
        "interval": f"{interval}s",
        "scrapeTimeout": f"{min(interval, 10)}s",
    }
    if api_key_secret is not None:
        secret, key = api_key_secret
        # llama-server demands the key on /metrics too: the monitor reads it from the Secret.
        endpoint["authorization"] = {"type": "Bearer", "credentials": {"name": secret, "key": key}}
    endpoints = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    return {
        "apiVersion": MONITORING_API,
        "kind": kind,
        "metadata": _metadata(name, namespace, labels, monitoring.get("monitor_labels") or {}),
        "spec": {
            "jobLabel": JOB_LABEL,
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [namespace]},
            endpoints: [endpoint],
        },
    }


def prometheus_rule(
    name: str,
    namespace: str,
    labels: dict[str, str],
    spec: MonitoringSpec,
    monitoring: KubernetesMonitoring,
) -> dict[str, Any]:
    """The server's alerts as a PrometheusRule."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": _metadata(name, namespace, labels, monitoring.get("monitor_labels") or {}),
        "spec": {"groups": rule_groups("llama-server", spec)},
    }


def dashboard_config_map(
    name: str, namespace: str, labels: dict[str, str], spec: MonitoringSpec
) -> dict[str, Any]:
    """The Grafana dashboard in a ConfigMap for Grafana's sidecar (label `grafana_dashboard`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(name, namespace, labels, {DASHBOARD_LABEL: "1"}),
        "data": {f"{name}.json": dashboard_json("llama-server", spec)},
    }
