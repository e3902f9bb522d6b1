"""Config models of a stack's metrics: who may scrape, what gets created, what the alerts watch.

The decode floor is not here: it is `server.minDecodeTps`, the same floor `llm-infra verify`
enforces; the alerts and the dashboard read it from there.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from components.monitoring.inputs import (
    FOR_MINUTES,
    KV_CACHE_RATIO,
    METRICS_PORT,
    SCRAPE_INTERVAL_SECONDS,
    STALL_MINUTES,
    AlertThresholds,
    ReferenceSpeeds,
)
from infra.config.base import (
    Cidr,
    DnsLabel,
    ImageReference,
    LabelKey,
    LabelValue,
    NamespacePods,
    Port,
    Strict,
)

ScrapeSeconds = Annotated[int, Field(ge=1, le=3600)]


class ReferenceFigures(Strict):
    """Measured speeds the dashboard draws as reference lines (seed 002 for the MI300X)."""

    decode_tps: Annotated[float, Field(gt=0)] | None = None
    """Single-stream decode tok/s (median)."""
    # Pulumi config object keys are strings: `64:` arrives as "64".
    aggregate_tps: dict[
        Annotated[int, Field(ge=1, strict=False)], Annotated[float, Field(gt=0)]
    ] = {}
    """Aggregate decode tok/s by concurrent streams, e.g. `{8: 542, 64: 830}`."""

    def speeds(self) -> ReferenceSpeeds:
        """The components' form: stream counts as strings (object keys on Pulumi's protocol)."""
        aggregate = {str(n): tps for n, tps in self.aggregate_tps.items()}
        return {"decode_tps": self.decode_tps, "aggregate_tps": aggregate}


class AlertSettings(Strict):
    """Thresholds of the alert rules (the decode floor is `server.minDecodeTps`)."""

    stall_minutes: Annotated[int, Field(ge=1, le=1440)] = STALL_MINUTES
    """`LlmNoTokensWhileRequestsWait`: minutes without a generated token while requests wait."""
    kv_cache_ratio: Annotated[float, Field(gt=0, le=1)] = KV_CACHE_RATIO
    """`LlmKvCacheNearlyFull`: the share of the KV cache (or of a slot's context) in use."""
    for_minutes: Annotated[int, Field(ge=0, le=1440)] = FOR_MINUTES
    """How long a condition must hold before down, floor and KV alerts fire."""

    def thresholds(self) -> AlertThresholds:
        """The components' form of the thresholds."""
        return {
            "stall_minutes": self.stall_minutes,
            "kv_cache_ratio": self.kv_cache_ratio,
            "for_minutes": self.for_minutes,
        }


class ScraperSettings(NamespacePods):
    """Pods allowed to scrape `/metrics` (Prometheus's): a namespace, optionally narrowed by pod
    labels."""


class KubernetesMetricsSettings(Strict):
    """llama-server's `/metrics`, its scrapers, and the prometheus-operator objects."""

    enabled: bool = True
    """Run llama-server with `--metrics` and add the scrape annotations."""
    scrapers: list[ScraperSettings] = [ScraperSettings(namespace="monitoring")]
    """Who the NetworkPolicy admits to the metrics port for scraping (never to the API port)."""
    port: Port = METRICS_PORT
    """Port of the metrics-only proxy beside llama-server: `GET /metrics` and nothing else, the
    API key (when set) held by the proxy, no credential for the scrapers."""
    service_monitor: bool = False
    """Create a prometheus-operator monitor (needs its CRDs, e.g. kube-prometheus-stack)."""
    monitor_kind: Literal["ServiceMonitor", "PodMonitor"] = "ServiceMonitor"
    """Which prometheus-operator object serviceMonitor creates: a ServiceMonitor (scrapes
    through the Service) or a PodMonitor (scrapes the pods)."""
    monitor_labels: dict[LabelKey, LabelValue] = {}
    """Labels of the monitor and the PrometheusRule, e.g. `release: kube-prometheus-stack`, which
    a Prometheus's serviceMonitorSelector and ruleSelector pick them by."""
    scrape_interval_seconds: ScrapeSeconds = SCRAPE_INTERVAL_SECONDS
    """How often Prometheus scrapes the metrics port (seconds)."""
    rules: bool = False
    """Create a PrometheusRule with the alerts (needs the prometheus-operator CRDs)."""
    dashboard: bool = True
    """A ConfigMap labelled `grafana_dashboard` with the Grafana dashboard."""
    dashboard_namespace: DnsLabel | None = None
    """Where the dashboard ConfigMap goes; unset: the server's namespace."""
    alerts: AlertSettings = AlertSettings()
    """Thresholds of the alert rules."""
    reference: ReferenceFigures = ReferenceFigures()
    """Measured speeds the dashboard draws as reference lines."""


class GpuExporterSettings(Strict):
    """AMD's device metrics exporter beside vLLM (GPU temperature, power, memory)."""

    image: ImageReference = "rocm/device-metrics-exporter:v1.2.1"
    """Image of AMD's device metrics exporter, pinned by a version tag or a digest."""
    allow_floating_image: bool = False
    """Accept an exporter image tag that pins no version."""


class HostMetricsSettings(Strict):
    """vLLM's `/metrics` behind a second Caddy site for the monitoring network only."""

    port: Port = 9443
    """HTTPS port of the metrics site on the host (TLS like the API site)."""
    allowed_cidrs: list[Cidr]
    """Networks allowed to scrape; everyone else gets 403."""
    allow_world: bool = False
    """Accept allowedCidrs that admit every address."""
    scrape_interval_seconds: ScrapeSeconds = SCRAPE_INTERVAL_SECONDS
    """Scrape interval of the rendered Prometheus scrape config (seconds)."""
    gpu_exporter: GpuExporterSettings | None = None
    """Also run the AMD device metrics exporter, served at `/gpu/metrics` on the metrics site."""
    alerts: AlertSettings = AlertSettings()
    """Thresholds of the alert rules."""
    reference: ReferenceFigures = ReferenceFigures()
    """Measured speeds the dashboard draws as reference lines."""
