"""`llm-infra docs`: the committed deployment references are current, and go stale on a change."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.monitoring.dashboard import panel_queries
from tests.component.test_render import render
from tests.conftest import ROOT, STACKS


def docs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "docs", *args],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "stack", ["strix-halo", "mi300x", "strix-halo-pair", "strix-halo-pair-split"]
)
def test_committed_reference_matches_what_is_deployed(stack: str) -> None:
    result = docs(stack, "--check")
    assert result.returncode == 0, f"{result.stderr} (run: llm-infra docs {stack})"


def test_a_changed_flag_makes_the_reference_stale(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.strix-halo.yaml"
    stack.write_text(
        (STACKS / "Pulumi.strix-halo.yaml").read_text().replace("gpuLayers: 40", "gpuLayers: 38")
    )
    result = docs(str(stack), "--check", "--output-file", str(ROOT / "docs" / "strix-halo.md"))
    assert result.returncode == 1
    assert "is stale" in result.stderr
    out = tmp_path / "strix-halo.md"
    assert docs(str(stack), "--output-file", str(out)).returncode == 0
    assert "| `-ngl` | `38` |" in out.read_text()


def test_reference_has_the_seed_sections() -> None:
    text = (ROOT / "docs" / "strix-halo.md").read_text()
    for heading in ("## Argument by argument", "## Memory budget", "## Resources", "## Probes",
                    "## GPU access", "## How to tune"):  # fmt: skip
        assert heading in text
    assert "| `--alias` | `deepseek-v4-flash-0731` |" in text
    assert "limits: cpu 4000m, memory 20Gi" in text


@pytest.mark.parametrize(
    ("stack", "server_key"),
    [("strix-halo", "apiKey: true"), ("strix-halo", "contBatching: false"), ("mi300x", None)],
)
def test_every_rendered_flag_is_explained_from_its_field_docstring(
    stack: str, server_key: str | None, tmp_path: Path
) -> None:
    from components.llamacpp.inputs import LlamaServerFlags
    from infra.cli.docs import flag_meanings

    text = (STACKS / f"Pulumi.{stack}.yaml").read_text()
    if server_key:
        text = text.replace("  llm-infra:server:\n", f"  llm-infra:server:\n    {server_key}\n")
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(text)
    out = tmp_path / "reference.md"
    result = docs(str(path), "--output-file", str(out))
    assert result.returncode == 0, result.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| `-")]
    flag = (
        server_key
        and {"apiKey": "--api-key-file", "contBatching": "--no-cont-batching"}[
            server_key.split(":")[0]
        ]
    )
    assert not flag or any(row.startswith(f"| `{flag}` |") for row in rows), rows
    unexplained = [row for row in rows if row.rstrip().endswith("|  |")]
    assert unexplained == [], unexplained
    # The meaning is the field's own docstring, not a second copy.
    assert flag_meanings(LlamaServerFlags)["-ngl"].startswith("GPU layers.")


@pytest.mark.parametrize("stack", ["strix-halo", "mi300x"])
def test_the_reference_lists_the_metrics_the_dashboard_and_every_rendered_alert(
    stack: str, tmp_path: Path
) -> None:
    out = tmp_path / stack
    assert render(stack, out).returncode == 0
    if stack == "mi300x":
        groups = yaml.safe_load((out / "files/opt/llm/monitoring/alerts.rules.yml").read_text())
        board = json.loads((out / "files/opt/llm/monitoring/dashboard.json").read_text())
    else:
        documents = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
        groups = next(d for d in documents if d["kind"] == "PrometheusRule")["spec"]
        config_map = next(d for d in documents if d["metadata"]["name"].endswith("-dashboard"))
        board = json.loads(next(iter(config_map["data"].values())))
    text = (ROOT / "docs" / f"{stack}.md").read_text()
    metrics, rest = text.split("## Metrics", 1)[1].split("## Dashboard", 1)
    dashboard, alerts = rest.split("## Alerts", 1)
    for rule in groups["groups"][0]["rules"]:
        assert f"| `{rule['alert']}` |" in alerts and f"`{rule['expr']}`" in alerts
    assert board["uid"] in dashboard
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert f"- {panel['title']}\n" in dashboard
    for _, expr in panel_queries(board):
        head = expr.split("{", 1)[0].rsplit("(", 1)[-1]
        assert f"`{head}`" in metrics, head
