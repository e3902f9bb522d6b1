"""The reference's metrics, dashboard and alerts sections, from the builders that make them."""

import re

from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.monitoring.dashboard import panel_queries, server_dashboard
from components.monitoring.queries import MonitoringSpec, ServerKind, alert_rules
from infra.config import DockerHostStack, KubernetesStack

_SERIES = re.compile(r"\b(?:llamacpp|vllm):[a-z_]+|\bgpu_[a-z_]+|\bkube_[a-z_]+|\bup\b")


def _monitoring(
    kind: ServerKind,
    spec: MonitoringSpec,
    scraped: list[str],
    dashboard_at: str,
    alerts: str | None = None,
) -> list[str]:
    """The metrics, dashboard and alerts sections, from the builders that make them
    (`alerts`: why no rule is deployed, in place of the alerts table)."""
    board = server_dashboard(kind, spec)
    queries = panel_queries(board)
    rules = alert_rules(kind, spec) if alerts is None else []
    series = sorted({name for _, e in queries for name in _SERIES.findall(e)}
                    | {name for r in rules for name in _SERIES.findall(r.expr)})  # fmt: skip
    panels = list(dict.fromkeys(p["title"] for p in board["panels"] if p["type"] != "row"))
    readers = "the dashboard and the alerts read" if alerts is None else "the dashboard reads"
    lines = ["## Metrics", "", *scraped, "", f"Series {readers}:", ""]
    lines += [", ".join(f"`{name}`" for name in series), ""]
    lines += ["## Dashboard", "", f"`{board['title']}` (uid `{board['uid']}`), {dashboard_at}:", ""]
    lines += [f"- {title}" for title in panels]
    marks = []
    if spec.get("min_decode_tps") is not None:
        marks.append(f"decode floor {spec.get('min_decode_tps'):g} tok/s (`server.minDecodeTps`)")
    speeds = spec.get("reference") or {}
    if speeds.get("decode_tps") is not None:
        marks.append(f"measured {speeds.get('decode_tps'):g} tok/s per stream")
    aggregate = {int(n): v for n, v in (speeds.get("aggregate_tps") or {}).items()}
    marks += [f"{v:g} tok/s at {n} streams" for n, v in sorted(aggregate.items())]
    if marks:
        lines += ["", "Threshold lines: " + "; ".join(marks) + "."]
    if alerts is not None:
        return [*lines, "", "## Alerts", "", alerts, ""]
    lines += ["", "## Alerts", "", "| Alert | Severity | For | Fires when |", "|---|---|---|---|"]
    for rule in rules:
        held = f"{rule.for_minutes}m" if rule.for_minutes else "-"
        lines.append(f"| `{rule.name}` | {rule.severity} | {held} | `{rule.expr}` |")
    if spec.get("min_decode_tps") is None:
        lines += ["", "No decode-floor alert: set `server.minDecodeTps` (tok/s per stream)."]
    return [*lines, ""]


def strix_halo_monitoring(stack: KubernetesStack, args: LlamaCppVulkanServerArgs) -> list[str]:
    """The sections of a llama-server on Kubernetes: its metrics proxy, scrapers and rules."""
    metrics = args.get("metrics")
    if metrics is None:
        return ["## Metrics", "", "Off (`metrics.enabled: false`): no `--metrics`.", ""]
    from components.llamacpp.monitoring import monitoring_spec
    from infra.targets.kubernetes import service_port

    name, namespace = stack.server.resource_name, stack.kubernetes.namespace
    spec = monitoring_spec(name, namespace, args, metrics)
    scrapers = ", ".join(f"`{s.namespace}`" for s in stack.metrics.scrapers)
    monitor = stack.metrics.monitor_kind if stack.metrics.service_monitor else None
    scraped = [
        f"- llama-server runs with `--metrics`; a metrics-only proxy beside it serves them at "
        f"`http://{name}.{namespace}.svc:{stack.metrics.port}/metrics` (no credential; with "
        "`server.apiKey` the proxy holds the key) and answers 404 for every other path.",
        f"- The NetworkPolicy admits {scrapers or 'no scraper'} to the metrics port "
        f"{stack.metrics.port} only, never to the API port {service_port(stack)} "
        "(NetworkPolicies admit ports, not paths).",
        f"- A {monitor} `{name}` (job `{name}`, every {stack.metrics.scrape_interval_seconds}s)"
        if monitor
        else "- No ServiceMonitor (`metrics.serviceMonitor: false`)",
        "- Pod annotations `prometheus.io/scrape`, `/port`, `/path` for a Prometheus without the "
        "operator (it must set `job` to the server name for the "
        + ("alerts" if stack.metrics.rules else "dashboard")
        + " to match).",
        "- llama-server b11434 exports no latency histogram and no KV-cache gauge: no TTFT panel; "
        + ("the context panel and alert use" if stack.metrics.rules else "the context panel uses")
        + " `llamacpp:n_tokens_max`, the longest sequence so far.",
    ]
    if stack.metrics.rules:
        scraped.append(
            f"- Alerts: PrometheusRule `{name}-alerts`; `LlmModelFetchFailed` needs "
            "kube-state-metrics."
        )
    where = (
        f"ConfigMap `{name}-dashboard` in `{stack.metrics.dashboard_namespace or namespace}` "
        "(label `grafana_dashboard`)"
        if stack.metrics.dashboard
        else "not deployed (`metrics.dashboard: false`)"
    )
    none = (
        None
        if stack.metrics.rules
        else "None deployed (`metrics.rules: false`): no PrometheusRule; set it true on a "
        "cluster with prometheus-operator for the alerts of this server."
    )
    return _monitoring("llama-server", spec, scraped, where, none)


def mi300x_monitoring(stack: DockerHostStack) -> list[str]:
    """The sections of vLLM on a Docker host: the metrics site behind Caddy and its files."""
    from components.vllm.host_monitoring import monitoring_dir, monitoring_spec
    from infra.config.feeds import fed
    from infra.targets.docker_host import monitoring

    metrics = monitoring(stack, fed(stack))
    if metrics is None or stack.metrics is None:
        return ["## Metrics", "", "Off (no `metrics:`): vLLM's /metrics stays on the compose "
                "network.", ""]  # fmt: skip
    speculative = stack.server.speculative
    spec = monitoring_spec(
        stack.server.served_model_name,
        stack.server.min_decode_tps,
        speculative.num_speculative_tokens if speculative else None,
        metrics,
    )
    folder = monitoring_dir(stack.host.base_dir)
    allowed = ", ".join(f"`{c}`" for c in stack.metrics.allowed_cidrs)
    scraped = [
        f"- `https://{stack.caddy.site}:{stack.metrics.port}/metrics`: a second Caddy site, TLS "
        f"like the API, allowed from {allowed}; others get 403. The API site still answers 404.",
        "- AMD's device metrics exporter at `/gpu/metrics` on the same site."
        if stack.metrics.gpu_exporter
        else "- No GPU exporter (`metrics.gpuExporter`).",
        f"- `{folder}/scrape.yml`: the Prometheus scrape config; `{folder}/alerts.rules.yml`: "
        "the alert rules.",
        "- No fetch alert: the fetch runs inside `pulumi up`, and a failed one fails the deploy.",
    ]
    return _monitoring("vllm", spec, scraped, f"`{folder}/dashboard.json`")
