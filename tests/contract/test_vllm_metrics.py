"""Every `vllm:*` series the mi300x dashboard and alerts read is one vLLM 0.33 exports.

The names and kinds come from vLLM's own source in the vLLM venv (its v1 metrics loggers and
speculative-decoding metrics), turned into exposition names as prometheus_client writes them.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from components.monitoring_dashboard import panel_queries
from tests.component.test_render import render
from tests.conftest import ROOT
from tests.contract.test_vllm_parser import vllm_python

pytestmark = pytest.mark.contract
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
    out = tmp_path_factory.mktemp("render") / "mi300x"
    assert render("mi300x", out, cwd=ROOT).returncode == 0
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
