"""Pure builders of the MI300X host's monitoring: the metrics site, the GPU exporter, the files.

vLLM's /metrics never leaves the compose network through the API site; a second Caddy site
(its own port and allowlist) serves it, and the GPU exporter's, to the monitoring network. The
dashboard, the alert rules and a Prometheus scrape config are written to the host as files for
the monitoring stack to pick up.
"""

import posixpath
from typing import Any, NamedTuple

import yaml

from components.monitoring.dashboard import dashboard_json
from components.monitoring.queries import METRICS_PATH, MonitoringSpec, rules_file
from components.vllm.caddyfile import GPU_METRICS_PATH, MetricsSite, site_is_ip
from components.vllm.inputs import CaddySite, HostMonitoring, VllmFlags

GPU_EXPORTER_SERVICE = "gpu-exporter"
GPU_EXPORTER_PORT = 5000
"""The port AMD's device metrics exporter listens on by default."""
CADDY_ROOT_CA = "caddy-root.crt"
"""With `tls: internal`, the scrape config trusts Caddy's root (copied next to it by the user)."""


def monitoring_dir(base_dir: str) -> str:
    """Where the dashboard, the rules and the scrape config go on the host."""
    return posixpath.join(base_dir, "monitoring")


def metrics_site(monitoring: HostMonitoring) -> MetricsSite:
    """The Caddy metrics site of the host."""
    gpu = monitoring.get("gpu_exporter_image")
    return {
        "port": monitoring["port"],
        "allowed_cidrs": list(monitoring["allowed_cidrs"]),
        "gpu_upstream": f"{GPU_EXPORTER_SERVICE}:{GPU_EXPORTER_PORT}" if gpu else None,
    }


def monitoring_spec(
    served_model_name: str,
    min_decode_tps: float | None,
    speculative_tokens: int | None,
    monitoring: HostMonitoring,
) -> MonitoringSpec:
    """What the dashboard and the alerts of the host's vLLM are generated from."""
    return {
        "job": served_model_name,
        "alias": served_model_name,
        "min_decode_tps": min_decode_tps,
        "speculative_tokens": speculative_tokens,
        "alerts": monitoring["alerts"],
        "reference": monitoring["reference"],
        "gpu_job": gpu_job(served_model_name) if monitoring.get("gpu_exporter_image") else None,
    }


def gpu_job(served_model_name: str) -> str:
    """The `job` of the GPU exporter's series in the rendered scrape config."""
    return f"{served_model_name}-gpu"


def scrape_config(caddy: CaddySite, monitoring: HostMonitoring, spec: MonitoringSpec) -> str:
    """A Prometheus `scrape_configs` fragment for the metrics site (HTTPS, the site's name)."""
    site = caddy["site"]
    host = f"[{site}]" if site_is_ip(site) and ":" in site else site
    target = f"{host}:{monitoring['port']}"
    interval = f"{monitoring['scrape_interval_seconds']}s"

    def job(name: str, path: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "job_name": name,
            "scheme": "https",
            "metrics_path": path,
            "scrape_interval": interval,
            "static_configs": [{"targets": [target]}],
        }
        if caddy["tls"] == "internal":
            entry["tls_config"] = {"ca_file": CADDY_ROOT_CA, "server_name": site}
        return entry

    jobs = [job(spec["job"], METRICS_PATH)]
    if spec.get("gpu_job"):
        jobs.append(job(str(spec.get("gpu_job")), GPU_METRICS_PATH))
    return yaml.safe_dump({"scrape_configs": jobs}, sort_keys=False)


def gpu_exporter_service(image: str) -> dict[str, Any]:
    """AMD's device metrics exporter on the compose network (reached through the metrics site)."""
    return {
        "image": image,
        "restart": "unless-stopped",
        "devices": ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"],
        "group_add": ["video"],
        "expose": [str(GPU_EXPORTER_PORT)],
    }


def monitoring_files(
    base_dir: str, caddy: CaddySite, monitoring: HostMonitoring, spec: MonitoringSpec
) -> dict[str, tuple[str, str]]:
    """The monitoring files by resource suffix: (remote path, content)."""
    directory = monitoring_dir(base_dir)
    return {
        "dashboard": (posixpath.join(directory, "dashboard.json"), dashboard_json("vllm", spec)),
        "alerts": (posixpath.join(directory, "alerts.rules.yml"), rules_file("vllm", spec)),
        "scrape": (
            posixpath.join(directory, "scrape.yml"),
            scrape_config(caddy, monitoring, spec),
        ),
    }


class HostMonitoringParts(NamedTuple):
    """What the host's monitoring adds to the bundle, built in one visit."""

    site: MetricsSite
    """The Caddy metrics site."""
    gpu_exporter: tuple[str, dict[str, Any]] | None
    """The GPU exporter's compose service (name, definition); None without its image."""
    files: dict[str, tuple[str, str]]
    """The dashboard, the rules and the scrape config by resource suffix: (remote path, text)."""


def host_monitoring(
    base_dir: str,
    caddy: CaddySite,
    flags: VllmFlags,
    min_decode_tps: float | None,
    monitoring: HostMonitoring,
) -> HostMonitoringParts:
    """The metrics site, the GPU exporter service and the monitoring files of the host."""
    speculative = flags.get("speculative_config")
    spec = monitoring_spec(
        flags["served_model_name"],
        min_decode_tps,
        speculative["num_speculative_tokens"] if speculative else None,
        monitoring,
    )
    image = monitoring.get("gpu_exporter_image")
    return HostMonitoringParts(
        site=metrics_site(monitoring),
        gpu_exporter=(GPU_EXPORTER_SERVICE, gpu_exporter_service(image)) if image else None,
        files=monitoring_files(base_dir, caddy, monitoring, spec),
    )
