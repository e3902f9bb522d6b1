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
from components.validation import Default, documented

STALL_MINUTES = 10
"""Default minutes without a generated token, while requests wait, before the stall alert."""
KV_CACHE_RATIO = 0.9
"""Default share of the KV cache (or of a slot's context) that fires the KV alert."""
FOR_MINUTES = 5
"""Default minutes a condition must hold before the down, floor and KV alerts fire."""
SCRAPE_INTERVAL_SECONDS = 30
"""Scrape interval of the monitors and scrape configs when the caller gives none."""
TokensPerSecond = Annotated[float, Field(gt=0)]
"""A speed in tokens per second."""
HoldMinutes = Annotated[int, Field(ge=0, le=10_080)]
"""Minutes a condition holds before an alert fires, at most a week."""
StallMinutes = Annotated[int, Field(ge=1, le=10_080)]
"""Minutes without a token before the stall alert, at most a week."""
ShareOfCache = Annotated[float, Field(gt=0, le=1)]
"""A share of the KV cache."""
ScrapeSeconds = Annotated[int, Field(ge=1, le=3600)]
"""A scrape interval (seconds)."""


@documented
class AlertThresholds(TypedDict):
    """When the alerts fire (the decode floor is the server's own `min_decode_tps`)."""

    stall_minutes: NotRequired[Annotated[StallMinutes, Default(STALL_MINUTES)]]
    """Minutes without a generated token while requests wait before LlmNoTokensWhileRequestsWait
    fires."""
    kv_cache_ratio: NotRequired[Annotated[ShareOfCache, Default(KV_CACHE_RATIO)]]
    """Share of the KV cache (vLLM) or of a slot's context (llama-server) that fires the KV
    alert."""
    for_minutes: NotRequired[Annotated[HoldMinutes, Default(FOR_MINUTES)]]
    """Minutes a condition must hold before the down, floor and KV alerts fire."""


@documented
class ReferenceSpeeds(TypedDict):
    """Measured speeds the dashboard draws as reference lines (seed 002 for the MI300X)."""

    decode_tps: NotRequired[TokensPerSecond | None]
    """Single-stream decode tok/s (median)."""
    aggregate_tps: NotRequired[Annotated[dict[StreamCount, TokensPerSecond], Default({})]]
    """Aggregate decode tok/s by concurrent streams (`{"8": 542}`)."""


METRICS_PORT = 9464
"""The metrics proxy's port when the caller gives none."""


@documented
class KubernetesMonitoring(TypedDict):
    """How a llama-server is scraped, and which monitoring objects come with it."""

    scrapers: NotRequired[Annotated[list[NetworkClient], Default([])]]
    """Who the NetworkPolicy admits to the metrics port for scraping (a monitoring namespace);
    they never reach the API port."""
    port: NotRequired[Annotated[Port, Default(METRICS_PORT)]]
    """Port of the metrics-only proxy beside llama-server, the one scrapers reach: it serves
    `GET /metrics` and nothing else, holding the API key itself."""
    monitor_kind: NotRequired[Literal["ServiceMonitor", "PodMonitor"] | None]
    """`ServiceMonitor` or `PodMonitor` (prometheus-operator CRDs); None creates neither."""
    scrape_interval_seconds: NotRequired[Annotated[ScrapeSeconds, Default(SCRAPE_INTERVAL_SECONDS)]]
    """Scrape interval of the monitor and the annotations (seconds)."""
    monitor_labels: NotRequired[Annotated[dict[LabelKey, LabelValue], Default({})]]
    """Extra labels of the monitor and the rule, which a Prometheus selects them by."""
    rules: NotRequired[Annotated[bool, Default(False)]]
    """Create a PrometheusRule with the server's alerts."""
    dashboard: NotRequired[Annotated[bool, Default(False)]]
    """Create a ConfigMap with the Grafana dashboard (label `grafana_dashboard: "1"`)."""
    dashboard_namespace: NotRequired[DnsLabel | None]
    """Namespace of the dashboard ConfigMap; absent or None: the server's."""
    alerts: NotRequired[Annotated[AlertThresholds, Default({})]]
    """When the alerts fire: stall minutes, KV share, how long a condition must hold."""
    reference: NotRequired[Annotated[ReferenceSpeeds, Default({})]]
    """Measured speeds, reference lines on the dashboard."""
    fetch_job_pattern: NotRequired[JobPattern | None]
    """Regex of the model fetch Job names: an alert when one failed (kube-state-metrics)."""
