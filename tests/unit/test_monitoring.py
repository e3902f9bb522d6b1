"""Pure monitoring builders: selectors, which alerts and panels exist, and the names they share."""

from __future__ import annotations

import re

from components.model_store.manifests import fetch_job_pattern, store_names
from components.monitoring.dashboard import dashboard_uid, panel_queries, server_dashboard
from components.monitoring.queries import MonitoringSpec, alert_rules, rule_groups, selector

K8S: MonitoringSpec = {"job": "ds", "alias": "ds-model", "namespace": "llm", "slot_context": 65536}
HOST: MonitoringSpec = {"job": "ds-model", "alias": "ds-model", "speculative_tokens": 7}


def test_series_are_selected_by_job_and_on_kubernetes_by_namespace() -> None:
    assert selector(K8S) == '{job="ds",namespace="llm"}'
    assert selector(HOST) == '{job="ds-model"}'
    for _, expr in panel_queries(server_dashboard("llama-server", K8S)):
        assert '{job="ds",namespace="llm"}' in expr


def test_the_fetch_alert_matches_every_fetch_job_name_and_nothing_else() -> None:
    pattern = re.compile(fetch_job_pattern("models"))
    for digest in ("0" * 64, "f31af773" + "a" * 56):
        names = store_names("models", digest)
        assert pattern.fullmatch(names["job"])
        assert not pattern.fullmatch(names["config_map"])
    assert not pattern.fullmatch(store_names("other", "0" * 64)["job"])


def test_the_floor_alert_and_line_exist_only_with_a_floor() -> None:
    assert "LlmDecodeBelowFloor" not in {r.name for r in alert_rules("vllm", HOST)}
    floored: MonitoringSpec = {**HOST, "min_decode_tps": 150}
    (rule,) = [r for r in alert_rules("vllm", floored) if r.name == "LlmDecodeBelowFloor"]
    assert " < 150 and max_over_time(vllm:num_requests_running" in rule.expr
    assert rule.expr.endswith("[5m]) <= 1")
    panels = {p["title"]: p for p in server_dashboard("vllm", floored)["panels"]}
    steps = panels["Decode tok/s per stream"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(s["value"], s["color"]) for s in steps] == [(None, "red"), (150, "green")]


def test_kv_alert_per_server_kind() -> None:
    assert "LlmKvCacheNearlyFull" in {r.name for r in alert_rules("vllm", HOST)}
    llama = {r.name: r for r in alert_rules("llama-server", K8S)}
    assert "LlmKvCacheNearlyFull" not in llama
    assert llama["LlmSlotContextNearlyFull"].expr.endswith("/ 65536 > 0.9")


def test_speculative_panels_only_with_speculative_decoding() -> None:
    titles = {p["title"] for p in server_dashboard("vllm", HOST)["panels"]}
    assert "Accepted tokens per draft" in titles
    plain: MonitoringSpec = {**HOST, "speculative_tokens": None}
    assert "Accepted tokens per draft" not in {
        p["title"] for p in server_dashboard("vllm", plain)["panels"]
    }


def test_rules_without_a_hold_have_no_for_and_carry_the_server_label() -> None:
    (group,) = rule_groups("llama-server", K8S)
    rules = {r["alert"]: r for r in group["rules"]}  # type: ignore[attr-defined]
    assert "for" not in rules["LlmNoTokensWhileRequestsWait"]
    assert rules["LlmServerDown"]["for"] == "5m"
    assert all(r["labels"]["llm_server"] == "ds" for r in rules.values())


def test_each_server_gets_its_own_stable_dashboard_uid() -> None:
    assert dashboard_uid(K8S) != dashboard_uid({**K8S, "namespace": "other"})
    assert len(dashboard_uid(K8S)) <= 40
