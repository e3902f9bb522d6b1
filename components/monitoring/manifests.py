"""Pure builders of a llama-server's monitoring objects on Kubernetes.

prometheus-operator's ServiceMonitor (or PodMonitor) and PrometheusRule, a ConfigMap that
Grafana's dashboard sidecar picks up by its `grafana_dashboard` label, and the pod annotations
a plain Prometheus's `kubernetes-pods` job scrapes by.
"""

from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import Field

from components.grammars import DnsLabel, JobPattern, LabelKey, LabelValue
from components.k8s.network_policies import NetworkClient
from components.monitoring.dashboard import dashboard_json
from components.monitoring.queries import (
    METRICS_PATH,
    AlertThresholds,
    MonitoringSpec,
    ReferenceSpeeds,
    rule_groups,
)
from components.validation import documented

if TYPE_CHECKING:
    from components.llamacpp.server import LlamaCppVulkanServerArgs

JOB_LABEL = "app.kubernetes.io/instance"
"""The server label whose value becomes the `job` of its series (the monitor's jobLabel)."""
MONITORING_API = "monitoring.coreos.com/v1"
DASHBOARD_LABEL = "grafana_dashboard"


@documented
class KubernetesMonitoring(TypedDict):
    """How a llama-server is scraped, and which monitoring objects come with it."""

    scrapers: NotRequired[list[NetworkClient]]
    """Who the NetworkPolicy admits to the server port for scraping (a monitoring namespace)."""
    monitor_kind: NotRequired[Literal["ServiceMonitor", "PodMonitor"] | None]
    """`ServiceMonitor` or `PodMonitor` (prometheus-operator CRDs); None creates neither."""
    scrape_interval_seconds: NotRequired[Annotated[int, Field(ge=1, le=3600)]]
    """Scrape interval of the monitor and the annotations (default 30)."""
    monitor_labels: NotRequired[dict[LabelKey, LabelValue]]
    """Extra labels of the monitor and the rule, which a Prometheus selects them by."""
    rules: NotRequired[bool]
    """Create a PrometheusRule with the server's alerts."""
    dashboard: NotRequired[bool]
    """Create a ConfigMap with the Grafana dashboard (label `grafana_dashboard: "1"`)."""
    dashboard_namespace: NotRequired[DnsLabel | None]
    """Namespace of the dashboard ConfigMap (default: the server's)."""
    alerts: NotRequired[AlertThresholds]
    """When the alerts fire: stall minutes, KV share, how long a condition must hold."""
    reference: NotRequired[ReferenceSpeeds]
    """Measured speeds, reference lines on the dashboard."""
    fetch_job_pattern: NotRequired[JobPattern | None]
    """Regex of the model fetch Job names: an alert when one failed (kube-state-metrics)."""


def monitoring_spec(
    name: str, namespace: str, args: "LlamaCppVulkanServerArgs", monitoring: KubernetesMonitoring
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
