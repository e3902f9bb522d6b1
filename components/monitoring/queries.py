"""What the dashboard shows and the alerts watch: one PromQL expression per signal, per server.

llama-server b11434 (`--metrics`) exports `llamacpp:*` counters and gauges but no latency
histogram and no KV-cache gauge; vLLM 0.33 exports `vllm:*` gauges, counters and histograms
(names from `vllm/v1/metrics/loggers.py`). Every panel and every alert is built from the
signals here, so a metric name is written once.
"""

from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

import yaml

from components.monitoring.inputs import AlertThresholds, ReferenceSpeeds
from components.validation import with_defaults

ServerKind = Literal["llama-server", "vllm"]
METRICS_PATH = "/metrics"
"""Where llama-server (with `--metrics`), vLLM and AMD's exporter serve Prometheus metrics."""
RATE_WINDOW = "5m"
"""The window of every rate: at least four scrapes at the longest interval allowed by default."""


class MonitoringSpec(TypedDict):
    """What the dashboard and the alert rules of one server are generated from."""

    job: str
    """The Prometheus `job` label of the server's series (the scrape sets it)."""
    alias: str
    """The model id the server reports (the dashboard's title)."""
    namespace: NotRequired[str | None]
    """The Kubernetes namespace label of the series (None on a Docker host)."""
    min_decode_tps: NotRequired[float | None]
    """Decode floor (tok/s per stream): the LlmDecodeBelowFloor alert and a threshold line."""
    alerts: NotRequired[AlertThresholds]
    """When the alerts fire (absent thresholds: AlertThresholds' defaults)."""
    reference: NotRequired[ReferenceSpeeds]
    """Measured speeds, drawn as reference lines."""
    slot_context: NotRequired[int | None]
    """llama-server: tokens per slot (`-c / -np`), what a sequence may grow to."""
    speculative_tokens: NotRequired[int | None]
    """vLLM: draft tokens per step (`num_speculative_tokens`), the best accepted length."""
    fetch_job_pattern: NotRequired[str | None]
    """Kubernetes: a regex of the fetch Job names, for the kube-state-metrics alert."""
    gpu_job: NotRequired[str | None]
    """The `job` label of AMD's device metrics exporter (None: no GPU panels)."""


def kv_cache_ratio(spec: MonitoringSpec) -> float:
    """The share of the KV cache (or of a slot's context) the KV alert and panel mark."""
    return alert_thresholds(spec)["kv_cache_ratio"]


def alert_thresholds(spec: MonitoringSpec) -> AlertThresholds:
    """The spec's alert thresholds, each one it leaves out at its declared default."""
    return with_defaults(spec.get("alerts") or {}, AlertThresholds)


def selector(spec: MonitoringSpec, job: str | None = None) -> str:
    """The label matchers of the server's series (`{job="...",namespace="..."}`)."""
    labels = [f'job="{job or spec["job"]}"']
    if spec.get("namespace"):
        labels.append(f'namespace="{spec.get("namespace")}"')
    return "{" + ",".join(labels) + "}"


def _metric(name: str, spec: MonitoringSpec) -> str:
    return f"{name}{selector(spec)}"


def _rate(name: str, spec: MonitoringSpec) -> str:
    return f"rate({_metric(name, spec)}[{RATE_WINDOW}])"


def _quantile(q: float, histogram: str, spec: MonitoringSpec) -> str:
    return f"histogram_quantile({q}, sum by (le) ({_rate(histogram + '_bucket', spec)}))"


@dataclass(frozen=True)
class Signals:
    """The PromQL of each quantity a server reports; None where the server does not export it."""

    up: str
    decode_tps: str
    """Decode speed of one stream while it generates (tok/s)."""
    generated_tps: str
    """Tokens generated per second, all streams together."""
    prefill_tps: str
    running: str
    waiting: str
    generated_total: str
    """The counter of generated tokens (the stall alert watches its increase)."""
    kv_use: str
    """Share of the KV cache in use; for llama-server the longest sequence so far per slot."""
    prompt_cache_hits: str
    ttft_p50: str | None = None
    ttft_p95: str | None = None
    spec_acceptance: str | None = None
    spec_accepted_per_draft: str | None = None


def llamacpp_signals(spec: MonitoringSpec) -> Signals:
    """llama-server b11434's `/metrics` as signals."""
    slot = spec.get("slot_context") or 1
    cached, fresh = "llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"
    return Signals(
        up=f"up{selector(spec)}",
        decode_tps=f"{_rate('llamacpp:tokens_predicted_total', spec)} / "
        f"{_rate('llamacpp:tokens_predicted_seconds_total', spec)}",
        generated_tps=_rate("llamacpp:tokens_predicted_total", spec),
        prefill_tps=f"{_rate(fresh, spec)} / {_rate('llamacpp:prompt_seconds_total', spec)}",
        running=_metric("llamacpp:requests_processing", spec),
        waiting=_metric("llamacpp:requests_deferred", spec),
        generated_total=_metric("llamacpp:tokens_predicted_total", spec),
        # No KV gauge in b11434: the high-water mark of a sequence, against the slot's context.
        kv_use=f"{_metric('llamacpp:n_tokens_max', spec)} / {slot}",
        prompt_cache_hits=f"{_rate(cached, spec)} / ({_rate(cached, spec)} + {_rate(fresh, spec)})",
    )


def vllm_signals(spec: MonitoringSpec) -> Signals:
    """vLLM 0.33's `/metrics` as signals."""
    tpot = "vllm:request_time_per_output_token_seconds"
    speculative = bool(spec.get("speculative_tokens"))
    accepted = _rate("vllm:spec_decode_num_accepted_tokens_total", spec)
    return Signals(
        up=f"up{selector(spec)}",
        # 1 / mean time per output token: what `vllm bench serve` reports as 1000 / TPOT ms.
        decode_tps=f"{_rate(tpot + '_count', spec)} / {_rate(tpot + '_sum', spec)}",
        generated_tps=_rate("vllm:generation_tokens_total", spec),
        prefill_tps=_rate("vllm:prompt_tokens_total", spec),
        running=_metric("vllm:num_requests_running", spec),
        waiting=_metric("vllm:num_requests_waiting", spec),
        generated_total=_metric("vllm:generation_tokens_total", spec),
        kv_use=_metric("vllm:kv_cache_usage_perc", spec),
        prompt_cache_hits=f"{_rate('vllm:prefix_cache_hits_total', spec)} / "
        f"{_rate('vllm:prefix_cache_queries_total', spec)}",
        ttft_p50=_quantile(0.5, "vllm:time_to_first_token_seconds", spec),
        ttft_p95=_quantile(0.95, "vllm:time_to_first_token_seconds", spec),
        spec_acceptance=f"{accepted} / {_rate('vllm:spec_decode_num_draft_tokens_total', spec)}"
        if speculative
        else None,
        spec_accepted_per_draft=f"{accepted} / {_rate('vllm:spec_decode_num_drafts_total', spec)}"
        if speculative
        else None,
    )


def signals(kind: ServerKind, spec: MonitoringSpec) -> Signals:
    """The signals of a server kind."""
    return llamacpp_signals(spec) if kind == "llama-server" else vllm_signals(spec)


@dataclass(frozen=True)
class GpuSignals:
    """AMD device metrics exporter series (per GPU)."""

    temperature_c: str
    power_w: str
    vram_used_ratio: str


def gpu_signals(job: str) -> GpuSignals:
    """The exporter's junction temperature, package power and VRAM use."""
    labels = f'{{job="{job}"}}'
    return GpuSignals(
        temperature_c=f"gpu_junction_temperature{labels}",
        power_w=f"gpu_average_package_power{labels}",
        vram_used_ratio=f"gpu_used_vram{labels} / gpu_total_vram{labels}",
    )


@dataclass(frozen=True)
class AlertRule:
    """One Prometheus alerting rule, and the signals its expression is made of."""

    name: str
    expr: str
    for_minutes: int
    severity: str
    summary: str
    description: str
    signals: tuple[str, ...]
    """The sub-expressions that must return data for the rule to mean anything."""

    def rule(self, labels: dict[str, str]) -> dict[str, object]:
        """The rule as Prometheus's rule files and PrometheusRule spell it."""
        rule: dict[str, object] = {"alert": self.name, "expr": self.expr}
        if self.for_minutes:
            rule["for"] = f"{self.for_minutes}m"
        rule["labels"] = {"severity": self.severity, **labels}
        rule["annotations"] = {"summary": self.summary, "description": self.description}
        return rule


def alert_rules(kind: ServerKind, spec: MonitoringSpec) -> list[AlertRule]:
    """The alerts of one server: down, stalled, below the decode floor, KV full, fetch failed."""
    s = signals(kind, spec)
    alerts = alert_thresholds(spec)
    hold, stall = alerts["for_minutes"], alerts["stall_minutes"]
    ratio = kv_cache_ratio(spec)
    alias = spec["alias"]
    rules = [
        AlertRule(
            "LlmServerDown",
            f"{s.up} == 0 or absent({s.up})",
            hold,
            "critical",
            f"{alias}: the server does not answer /metrics",
            f"Prometheus could not scrape {alias} (job {spec['job']}) for {hold} minutes.",
            (s.up,),
        ),
        AlertRule(
            "LlmNoTokensWhileRequestsWait",
            f"{s.waiting} > 0 and increase({s.generated_total}[{stall}m]) == 0",
            0,
            "critical",
            f"{alias}: requests wait and no token was generated for {stall} minutes",
            f"{alias} generated nothing in {stall} minutes while {{{{ $value }}}} requests "
            "waited: the server is hung (a lost GPU device, a stuck slot).",
            (s.generated_total, s.waiting),
        ),
    ]
    floor = spec.get("min_decode_tps")
    if floor is not None:
        rules.append(
            AlertRule(
                "LlmDecodeBelowFloor",
                # The floor is a single-stream figure: batched streams each decode slower by
                # design (seed 002: 542 tok/s over 8 streams is 68 per stream), so the alert
                # holds only while at most one request ran in the whole rate window.
                f"{s.decode_tps} < {floor:g} and max_over_time({s.running}[{RATE_WINDOW}]) <= 1",
                hold,
                "warning",
                f"{alias}: decode below {floor:g} tok/s",
                f'{alias} decodes {{{{ $value | printf "%.1f" }}}} tok/s on a single stream, '
                f"below server.minDecodeTps {floor:g} (a CPU fallback, thermal throttling, or a "
                "speculative decoder that stopped accepting).",
                (s.decode_tps, s.running),
            )
        )
    if kind == "vllm":
        rules.append(
            AlertRule(
                "LlmKvCacheNearlyFull",
                f"{s.kv_use} > {ratio:g}",
                hold,
                "warning",
                f"{alias}: KV cache above {ratio:.0%}",
                f"{alias} uses {{{{ $value | humanizePercentage }}}} of its GPU KV cache: new "
                "requests queue or preempt running ones.",
                (s.kv_use,),
            )
        )
    else:
        rules.append(
            AlertRule(
                "LlmSlotContextNearlyFull",
                f"{s.kv_use} > {ratio:g}",
                0,
                "info",
                f"{alias}: a sequence used more than {ratio:.0%} of a slot's context",
                f"llama-server exports no KV-cache gauge; its longest sequence since start "
                f"(llamacpp:n_tokens_max) is {{{{ $value | humanizePercentage }}}} of a slot's "
                f"{spec.get('slot_context')} tokens: longer prompts are cut off "
                "(raise server.contextSize).",
                (s.kv_use,),
            )
        )
    pattern = spec.get("fetch_job_pattern")
    if pattern:
        failed = (
            f'kube_job_status_failed{{namespace="{spec.get("namespace")}",job_name=~"{pattern}"}}'
        )
        rules.append(
            AlertRule(
                "LlmModelFetchFailed",
                f"{failed} > 0",
                0,
                "critical",
                f"{alias}: the model fetch Job failed",
                "The fetch Job {{ $labels.job_name }} failed (kube-state-metrics): the model is "
                "not on the volume; see the Job's log.",
                (failed,),
            )
        )
    return rules


def rule_groups(kind: ServerKind, spec: MonitoringSpec) -> list[dict[str, object]]:
    """The Prometheus rule groups of one server."""
    labels = {"llm_server": spec["job"]}
    rules = [rule.rule(labels) for rule in alert_rules(kind, spec)]
    return [{"name": f"llm-infra-{spec['job']}", "rules": rules}]


def rules_file(kind: ServerKind, spec: MonitoringSpec) -> str:
    """A Prometheus rules file (`rule_files:`), as `promtool check rules` reads it."""
    return yaml.safe_dump({"groups": rule_groups(kind, spec)}, sort_keys=False, width=120)
