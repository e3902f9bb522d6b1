"""Inputs of the monitoring pieces: alert thresholds, reference speeds, KubernetesMonitoring.

Every rule for these inputs lives here; the builders take them validated.
"""

from typing import Annotated, Literal, NotRequired, TypedDict

from pydantic import Field

from components.grammars import (
    DnsLabel,
    JobPattern,
    LabelKey,
    LabelValue,
    Port,
    StreamCount,
)
from components.k8s.network_policies import NetworkClient
from components.validation import documented


@documented
class AlertThresholds(TypedDict):
    """When the alerts fire (the decode floor is the server's own `min_decode_tps`)."""

    stall_minutes: NotRequired[Annotated[int, Field(ge=1, le=10_080)]]
    """Minutes without a generated token while requests wait before LlmNoTokensWhileRequestsWait
    fires (default 10)."""
    kv_cache_ratio: NotRequired[Annotated[float, Field(gt=0, le=1)]]
    """Share of the KV cache (vLLM) or of a slot's context (llama-server) that fires the KV
    alert (default 0.9)."""
    for_minutes: NotRequired[Annotated[int, Field(ge=0, le=10_080)]]
    """Minutes a condition must hold before the down, floor and KV alerts fire (default 5)."""


@documented
class ReferenceSpeeds(TypedDict):
    """Measured speeds the dashboard draws as reference lines (seed 002 for the MI300X)."""

    decode_tps: NotRequired[Annotated[float, Field(gt=0)] | None]
    """Single-stream decode tok/s (median)."""
    aggregate_tps: NotRequired[dict[StreamCount, Annotated[float, Field(gt=0)]]]
    """Aggregate decode tok/s by concurrent streams (`{"8": 542}`)."""


METRICS_PORT = 9464
"""The metrics proxy's port when the caller gives none."""


@documented
class KubernetesMonitoring(TypedDict):
    """How a llama-server is scraped, and which monitoring objects come with it."""

    scrapers: NotRequired[list[NetworkClient]]
    """Who the NetworkPolicy admits to the metrics port for scraping (a monitoring namespace);
    they never reach the API port."""
    port: NotRequired[Port]
    """Port of the metrics-only proxy beside llama-server, the one scrapers reach: it serves
    `GET /metrics` and nothing else, holding the API key itself (default 9464)."""
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
