"""Every `vllm:*` series the mi300x dashboard and alerts read is one vLLM 0.33 exports.

The names and kinds come from vLLM's own source in the vLLM venv (its v1 metrics loggers and
speculative-decoding metrics), turned into exposition names as prometheus_client writes them.
Then vLLM's own `PrometheusStatLogger`, fed with engine statistics (no GPU here), is scraped by a
real Prometheus under the rendered job: every panel and alert signal returns data, with the
values the statistics imply.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring.dashboard import panel_queries
from components.monitoring.queries import MonitoringSpec, alert_rules
from components.vllm.host_monitoring import monitoring_spec
from infra.config import DockerHostStack, read_stack_file
from infra.config.feeds import fed
from infra.targets.docker_host import monitoring as host_monitoring
from tests.conftest import ROOT
from tests.support.llama_server import free_port
from tests.support.prometheus import LivePrometheus, run_prometheus
from tests.support.render import rendered_stack
from tests.support.vllm_parser import vllm_python

SCRIPT = Path(__file__).parent.parent / "support" / "vllm_metric_names.py"
SERIES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
VLLM_SERIES = re.compile(r"\bvllm:[a-z_]+")


def vllm_metrics() -> dict[str, str]:
    result = subprocess.run(
        [str(vllm_python()), str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["version"] == "0.33.0"
    metrics: dict[str, str] = document["metrics"]
    return metrics


def exported_series(metrics: dict[str, str]) -> set[str]:
    """Series names as prometheus_client exposes them (`_total` on counters, histogram parts)."""
    return {name + suffix for name, kind in metrics.items() for suffix in SERIES[kind]}


@pytest.fixture(scope="module")
def mi300x(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = rendered_stack("mi300x", tmp_path_factory.mktemp("render"))
    return out / "files/opt/llm/monitoring"


def test_vllm_source_defines_the_metric_kinds_the_queries_assume() -> None:
    metrics = vllm_metrics()
    assert metrics["vllm:num_requests_waiting"] == "gauge"
    assert metrics["vllm:time_to_first_token_seconds"] == "histogram"
    assert metrics["vllm:spec_decode_num_accepted_tokens"] == "counter"


def test_every_vllm_series_on_the_dashboard_and_in_the_alerts_is_exported(mi300x: Path) -> None:
    exported = exported_series(vllm_metrics())
    dashboard = json.loads((mi300x / "dashboard.json").read_text())
    exprs = [expr for _, expr in panel_queries(dashboard)]
    exprs.append((mi300x / "alerts.rules.yml").read_text())
    used = {name for expr in exprs for name in VLLM_SERIES.findall(expr)}
    assert {"vllm:kv_cache_usage_perc", "vllm:spec_decode_num_draft_tokens_total"} <= used
    assert sorted(used - exported) == []


def test_a_misspelt_series_would_be_caught() -> None:
    exported = exported_series(vllm_metrics())
    # prometheus_client adds `_total` to a counter: the bare name is not a series.
    assert "vllm:generation_tokens" not in exported
    assert "vllm:generation_tokens_total" in exported


EXPORTER = Path(__file__).parent.parent / "support" / "vllm_metrics_exporter.py"


@dataclass
class ScrapedVllm:
    prometheus: LivePrometheus
    dashboard: dict[str, Any]
    spec: MonitoringSpec


READY_WITHIN_S = 120.0


def wait_for_ready(process: subprocess.Popen[str]) -> None:
    """Until the exporter prints `ready`, past whatever torch and vLLM log before it (a
    warning line, say); a failure names what it printed, without waiting for an exit that a
    server never makes."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + READY_WITHIN_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line.strip() == "ready":
            return
        if not line:
            break
        seen.append(line)
    process.kill()
    pytest.fail(f"the exporter never printed ready within {READY_WITHIN_S:g} s: {''.join(seen)}")


@pytest.fixture(scope="module")
def scraped_vllm(mi300x: Path) -> Iterator[ScrapedVllm]:
    """vLLM's own stat logger scraped by a real Prometheus under the rendered job and path."""
    stack = read_stack_file(ROOT / "stacks" / "Pulumi.mi300x.yaml").stack()
    assert isinstance(stack, DockerHostStack) and stack.server.speculative is not None
    monitoring = host_monitoring(stack, fed(stack))
    assert monitoring is not None
    spec = monitoring_spec(
        stack.server.served_model_name,
        stack.server.min_decode_tps,
        stack.server.speculative.num_speculative_tokens,
        monitoring,
    )
    (job,) = yaml.safe_load((mi300x / "scrape.yml").read_text())["scrape_configs"]
    port = free_port()
    process = subprocess.Popen(
        [str(vllm_python()), str(EXPORTER), str(port), stack.server.served_model_name,
         str(spec.get("speculative_tokens"))],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )  # fmt: skip
    try:
        wait_for_ready(process)
        # The rendered job, scraped directly: the Caddy metrics site in front of it is tested
        # live in test_caddy.
        config = {
            "global": {"evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": job["job_name"],
                    "metrics_path": job["metrics_path"],
                    "scrape_interval": "1s",
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                }
            ],
        }
        rules = yaml.safe_load((mi300x / "alerts.rules.yml").read_text())
        with run_prometheus(config, rules) as prometheus:
            prometheus.wait_for(
                f'increase(vllm:generation_tokens_total{{job="{job["job_name"]}"}}[1m]) > 0'
            )
            dashboard = json.loads((mi300x / "dashboard.json").read_text())
            yield ScrapedVllm(prometheus, dashboard, spec)
    finally:
        process.kill()
        process.wait()


def test_every_vllm_dashboard_query_returns_data_from_vllms_logger(
    scraped_vllm: ScrapedVllm,
) -> None:
    queries = panel_queries(scraped_vllm.dashboard)
    empty = [(title, expr) for title, expr in queries if not scraped_vllm.prometheus.query(expr)]
    assert empty == []


def test_the_vllm_panels_compute_what_the_engine_reported(scraped_vllm: ScrapedVllm) -> None:
    values = {
        title: float(scraped_vllm.prometheus.query(expr)[0]["value"][1])
        for title, expr in panel_queries(scraped_vllm.dashboard)
        if title != "Requests running and waiting"
    }
    # 6 ms per output token; 4 of 7 drafted tokens accepted; 100 of 400 prompt tokens cached.
    assert values["Decode tok/s per stream"] == pytest.approx(1 / 0.006)
    assert values["Draft acceptance rate"] == pytest.approx(4 / 7)
    assert values["Accepted tokens per draft"] == pytest.approx(4)
    assert values["KV cache use"] == pytest.approx(0.42)
    assert values["Prompt-cache hits"] == pytest.approx(0.25)
    assert 0.25 <= values["Time to first token"] <= 0.5


def test_every_vllm_alert_evaluates_and_its_signals_return_data(scraped_vllm: ScrapedVllm) -> None:
    prometheus = scraped_vllm.prometheus
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    assert {r["name"]: r["health"] for r in rules} == {r["name"]: "ok" for r in rules}
    for rule in alert_rules("vllm", scraped_vllm.spec):
        for signal in rule.signals:
            assert prometheus.query(signal), f"{rule.name}: no data for {signal}"
    # 167 tok/s is above the floor of 150 and 42% KV below 90%: neither alert is raised.
    assert not prometheus.query('ALERTS{alertname=~"LlmDecodeBelowFloor|LlmKvCacheNearlyFull"}')
