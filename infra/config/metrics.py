"""Config models of a stack's metrics: who may scrape, what gets created, what the alerts watch.

The decode floor is not here: it is `server.minDecodeTps`, the same floor `llm-infra verify`
enforces; the alerts and the dashboard read it from there.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from components.monitoring.inputs import (
    AlertThresholds,
    HoldMinutes,
    KubernetesMonitoring,
    ReferenceSpeeds,
    ScrapeSeconds,
    ShareOfCache,
    StallMinutes,
    TokensPerSecond,
)
from components.vllm.inputs import HostMonitoring
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
from infra.config.declared import declared


class ReferenceFigures(Strict):
    """Measured speeds the dashboard draws as reference lines (seed 002 for the MI300X)."""

    decode_tps: TokensPerSecond | None = declared(ReferenceSpeeds, "decode_tps")
    # Pulumi config object keys are strings: `64:` arrives as "64".
    aggregate_tps: dict[Annotated[int, Field(ge=1, strict=False)], TokensPerSecond] = declared(
        ReferenceSpeeds, "aggregate_tps"
    )

    def speeds(self) -> ReferenceSpeeds:
        """The components' form: stream counts as strings (object keys on Pulumi's protocol)."""
        aggregate = {str(n): tps for n, tps in self.aggregate_tps.items()}
        return {"decode_tps": self.decode_tps, "aggregate_tps": aggregate}


class AlertSettings(Strict):
    """Thresholds of the alert rules (the decode floor is `server.minDecodeTps`)."""

    stall_minutes: StallMinutes = declared(AlertThresholds, "stall_minutes")
    kv_cache_ratio: ShareOfCache = declared(AlertThresholds, "kv_cache_ratio")
    for_minutes: HoldMinutes = declared(AlertThresholds, "for_minutes")

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
    port: Port = declared(KubernetesMonitoring, "port")
    service_monitor: bool = False
    """Create a prometheus-operator monitor (needs its CRDs, e.g. kube-prometheus-stack)."""
    monitor_kind: Literal["ServiceMonitor", "PodMonitor"] = "ServiceMonitor"
    """Which prometheus-operator object serviceMonitor creates: a ServiceMonitor (scrapes
    through the Service) or a PodMonitor (scrapes the pods)."""
    monitor_labels: dict[LabelKey, LabelValue] = declared(KubernetesMonitoring, "monitor_labels")
    scrape_interval_seconds: ScrapeSeconds = declared(
        KubernetesMonitoring, "scrape_interval_seconds"
    )
    rules: bool = declared(KubernetesMonitoring, "rules")
    dashboard: bool = True
    """A ConfigMap labelled `grafana_dashboard` with the Grafana dashboard."""
    dashboard_namespace: DnsLabel | None = None
    """Where the dashboard ConfigMap goes; unset: the server's namespace."""
    alerts: AlertSettings = declared(KubernetesMonitoring, "alerts", AlertSettings)
    reference: ReferenceFigures = declared(KubernetesMonitoring, "reference", ReferenceFigures)


class GpuExporterSettings(Strict):
    """AMD's device metrics exporter beside vLLM (GPU temperature, power, memory)."""

    image: ImageReference = "rocm/device-metrics-exporter:v1.2.1"
    """Image of AMD's device metrics exporter, pinned by a version tag or a digest."""
    allow_floating_image: bool = False
    """Accept an exporter image tag that pins no version."""


class HostMetricsSettings(Strict):
    """vLLM's `/metrics` behind a second Caddy site for the monitoring network only."""

    port: Port = declared(HostMonitoring, "port")
    allowed_cidrs: list[Cidr] = declared(HostMonitoring, "allowed_cidrs")
    allow_world: bool = declared(HostMonitoring, "allow_world")
    scrape_interval_seconds: ScrapeSeconds = declared(HostMonitoring, "scrape_interval_seconds")
    gpu_exporter: GpuExporterSettings | None = None
    """Also run the AMD device metrics exporter, served at `/gpu/metrics` on the metrics site."""
    alerts: AlertSettings = declared(HostMonitoring, "alerts", AlertSettings)
    reference: ReferenceFigures = declared(HostMonitoring, "reference", ReferenceFigures)
