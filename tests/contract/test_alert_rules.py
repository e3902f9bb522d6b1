"""The alert rules under `promtool`: `check rules` clean, and a unit test per alert.

Each alert gets synthetic series that make it fire and series that must leave it silent,
evaluated by `promtool test rules` with the rules exactly as rendered for each server kind.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring.queries import MonitoringSpec, ServerKind, alert_rules, rules_file
from tests.conftest import ROOT
from tests.support.prometheus import prometheus_tool
from tests.support.render import render

K8S: MonitoringSpec = {
    "job": "ds",
    "alias": "deepseek-v4-flash-0731",
    "namespace": "llm",
    "min_decode_tps": 20,
    "alerts": {"stall_minutes": 10, "kv_cache_ratio": 0.9, "for_minutes": 5},
    "slot_context": 100,
    "fetch_job_pattern": "models-fetch-[0-9a-f]{8}",
}
HOST: MonitoringSpec = {
    "job": "ds",
    "alias": "deepseek-v4-flash-0731",
    "min_decode_tps": 150,
    "alerts": {"stall_minutes": 10, "kv_cache_ratio": 0.9, "for_minutes": 5},
    "speculative_tokens": 7,
}
LLAMA = {"job": "ds", "namespace": "llm"}
VLLM = {"job": "ds", "model_name": "deepseek-v4-flash-0731", "engine": "0"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_tool("promtool"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def test_promtool_checks_the_rendered_rules_of_both_stacks(tmp_path: Path) -> None:
    for stack in ("strix-halo", "mi300x"):
        out = tmp_path / stack
        assert render(stack, out, cwd=ROOT).returncode == 0
        if stack == "mi300x":
            path = out / "files/opt/llm/monitoring/alerts.rules.yml"
        else:
            documents = yaml.safe_load_all((out / "manifests.yaml").read_text())
            rule = next(d for d in documents if d["kind"] == "PrometheusRule")
            path = tmp_path / "strix-halo.rules.yml"
            path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        count = sum(len(g["rules"]) for g in yaml.safe_load(path.read_text())["groups"])
        result = promtool("check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {count} rules found" in result.stdout, stack


def test_promtool_rejects_a_broken_expression(tmp_path: Path) -> None:
    text = rules_file("vllm", HOST).replace("> 0.9", "> > 0.9")
    path = tmp_path / "broken.yml"
    path.write_text(text)
    assert promtool("check", "rules", str(path)).returncode != 0


def run_case(
    kind: ServerKind,
    spec: MonitoringSpec,
    tmp_path: Path,
    input_series: list[dict[str, str]],
    alert: str,
    at: str,
    expected: list[dict[str, Any]],
) -> None:
    (tmp_path / "rules.yml").write_text(rules_file(kind, spec))
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", str(tmp_path / "test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


# How Prometheus expands each alert's `$value` in the firing case below.
VALUES = {
    "LlmNoTokensWhileRequestsWait": {"llama-server": "2", "vllm": "3"},
    "LlmDecodeBelowFloor": {"llama-server": "10.0", "vllm": "10.0"},
    "LlmKvCacheNearlyFull": {"vllm": "95%"},
    "LlmSlotContextNearlyFull": {"llama-server": "95%"},
}
TEMPLATES = ("{{ $value }}", '{{ $value | printf "%.1f" }}', "{{ $value | humanizePercentage }}")


def expected_alert(kind: ServerKind, alert: str, spec: MonitoringSpec, **extra: str) -> Any:
    """The labels and the expanded annotations the firing alert must carry."""
    (rule,) = [r for r in alert_rules(kind, spec) if r.name == alert]
    value = VALUES.get(alert, {}).get(kind, "")
    annotations = {}
    for key, text in (("summary", rule.summary), ("description", rule.description)):
        for template in TEMPLATES:
            text = text.replace(template, value)
        annotations[key] = text.replace("{{ $labels.job_name }}", extra.get("job_name", ""))
    return {
        "exp_labels": {"severity": rule.severity, "llm_server": spec["job"], **extra},
        "exp_annotations": annotations,
    }


Series = list[dict[str, str]]


def llama_decoding(tokens: str, seconds: str) -> Series:
    """A llama-server decoding one request: its token and decode-time counters."""
    return [
        series("llamacpp:tokens_predicted_total", LLAMA, tokens),
        series("llamacpp:tokens_predicted_seconds_total", LLAMA, seconds),
        series("llamacpp:requests_processing", LLAMA, "1x20"),
    ]


def vllm_decoding(tokens: str, seconds: str, running: str) -> Series:
    """vLLM decoding `running` requests: its time-per-output-token histogram's count and sum."""
    return [
        series("vllm:request_time_per_output_token_seconds_count", VLLM, tokens),
        series("vllm:request_time_per_output_token_seconds_sum", VLLM, seconds),
        series("vllm:num_requests_running", VLLM, running),
    ]


# (kind, alert, eval time, series that fire it, series that must not)
CASES: list[tuple[ServerKind, str, str, Series, Series, dict[str, str]]] = [
    ("llama-server", "LlmServerDown", "10m",
     [series("up", LLAMA, "1 1 0x10")], [series("up", LLAMA, "1x10")], LLAMA),
    ("vllm", "LlmServerDown", "10m",
     [series("up", {"job": "ds"}, "1 1 0x10")], [series("up", {"job": "ds"}, "1x10")],
     {"job": "ds"}),
    ("llama-server", "LlmNoTokensWhileRequestsWait", "15m",
     [series("llamacpp:requests_deferred", LLAMA, "2x20"),
      series("llamacpp:tokens_predicted_total", LLAMA, "500x20")],
     [series("llamacpp:requests_deferred", LLAMA, "2x20"),
      series("llamacpp:tokens_predicted_total", LLAMA, "500+30x20")], LLAMA),
    ("vllm", "LlmNoTokensWhileRequestsWait", "15m",
     [series("vllm:num_requests_waiting", VLLM, "3x20"),
      series("vllm:generation_tokens_total", VLLM, "900x20")],
     [series("vllm:num_requests_waiting", VLLM, "0x20"),
      series("vllm:generation_tokens_total", VLLM, "900x20")], VLLM),
    # 600 tokens in 60 s of decoding a minute: 10 tok/s, under the floor of 20; 60 tok/s is not.
    ("llama-server", "LlmDecodeBelowFloor", "15m",
     llama_decoding("0+600x20", "0+60x20"), llama_decoding("0+600x20", "0+10x20"), LLAMA),
    # 60 output tokens at 0.1 s each per minute: 10 tok/s, under 150; at 5 ms, 200 tok/s.
    ("vllm", "LlmDecodeBelowFloor", "15m",
     vllm_decoding("0+60x20", "0+6x20", "1x20"), vllm_decoding("0+60x20", "0+0.3x20", "1x20"),
     VLLM),
    # Batched: 8 streams at 68 tok/s each (seed 002's 542 over 8) are no fallback.
    ("vllm", "LlmDecodeBelowFloor", "15m",
     vllm_decoding("0+60x20", "0+6x20", "1x20"), vllm_decoding("0+480x20", "0+7.06x20", "8x20"),
     VLLM),
    ("vllm", "LlmKvCacheNearlyFull", "10m",
     [series("vllm:kv_cache_usage_perc", VLLM, "0.95x10")],
     [series("vllm:kv_cache_usage_perc", VLLM, "0.5x10")], VLLM),
    ("llama-server", "LlmSlotContextNearlyFull", "2m",
     [series("llamacpp:n_tokens_max", LLAMA, "95x5")],
     [series("llamacpp:n_tokens_max", LLAMA, "50x5")], LLAMA),
    ("llama-server", "LlmModelFetchFailed", "2m",
     [series("kube_job_status_failed", {"job": "kube-state-metrics", "namespace": "llm",
                                        "job_name": "models-fetch-0123abcd"}, "1x5")],
     [series("kube_job_status_failed", {"job": "kube-state-metrics", "namespace": "llm",
                                        "job_name": "other-fetch-0123abcd"}, "1x5"),
      series("kube_job_status_failed", {"job": "kube-state-metrics", "namespace": "llm",
                                        "job_name": "models-fetch-0123abcd"}, "0x5")],
     {"job": "kube-state-metrics", "namespace": "llm", "job_name": "models-fetch-0123abcd"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "alert", "at", "firing", "silent", "series_labels"),
    CASES,
    ids=[f"{kind}-{alert}-{i}" for i, (kind, alert, *_) in enumerate(CASES)],
)
def test_alert_fires_when_it_should_and_not_otherwise(
    kind: ServerKind,
    alert: str,
    at: str,
    firing: list[dict[str, str]],
    silent: list[dict[str, str]],
    series_labels: dict[str, str],
    tmp_path: Path,
) -> None:
    spec = K8S if kind == "llama-server" else HOST
    expected = [expected_alert(kind, alert, spec, **series_labels)]
    run_case(kind, spec, tmp_path, firing, alert, at, expected)
    run_case(kind, spec, tmp_path, silent, alert, at, [])


def test_a_server_that_vanished_from_discovery_counts_as_down(tmp_path: Path) -> None:
    other = series("up", {"job": "another", "namespace": "llm"}, "1x10")
    run_case("llama-server", K8S, tmp_path, [other], "LlmServerDown", "10m",
             [expected_alert("llama-server", "LlmServerDown", K8S, **LLAMA)])  # fmt: skip


def test_every_alert_of_both_kinds_has_a_unit_test() -> None:
    tested = {(kind, alert) for kind, alert, *_ in CASES}
    for kind, spec in (("llama-server", K8S), ("vllm", HOST)):
        names = {(kind, rule.name) for rule in alert_rules(kind, spec)}  # type: ignore[arg-type]
        assert names <= tested, names - tested
