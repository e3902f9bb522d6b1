"""`llm-infra docs`: the committed deployment references are current, and go stale on a change."""

import json
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from components.monitoring.dashboard import panel_queries
from infra.config import read_stack_file
from infra.lock import stack_model_sources
from infra.plan.picture import plan_svg
from infra.plan.report import GIB, Device, Plan, gib, usage_text
from infra.targets.registry import stack_plan
from tests.conftest import ROOT, STACKS
from tests.support.cli import run_cli
from tests.support.render import COMMITTED_STACKS, render


def docs(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["docs", *args], cwd=ROOT)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
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
    from infra.reference.flags import flag_meanings

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


def stack_plan_of(stack: str) -> Plan:
    stack_file = read_stack_file(stack)
    config = stack_file.stack()
    return stack_plan(config, stack_model_sources(config, stack_file.lock_path, preview=True))


@pytest.mark.parametrize(
    "stack", ["strix-halo", "mi300x", "strix-halo-pair", "strix-halo-pair-split"]
)
def test_plan_picture_has_a_bar_per_device_labelled_with_the_plans_figures(stack: str) -> None:
    plan = stack_plan_of(stack)
    picture = ROOT / "docs" / f"{stack}.plan.svg"
    assert f"]({stack}.plan.svg)" in (ROOT / "docs" / f"{stack}.md").read_text()
    root = ElementTree.fromstring(picture.read_text())
    svg = "{http://www.w3.org/2000/svg}"
    groups = [g for g in root.iter(f"{svg}g") if g.get("class") == "device"]
    assert [g.get("data-device") for g in groups] == list(plan.devices)
    for group in groups:
        device = plan.devices[str(group.get("data-device"))]
        rects = [r for r in group.iter(f"{svg}rect") if r.get("class") in ("item", "free")]
        shown = {r.get("data-item"): r.get("data-gib") for r in rects}
        expected = {item: f"{gib(size):.2f}" for item, size in device.items.items() if size > 0}
        capacity = device.capacity_bytes
        if capacity is not None and device.used_bytes < capacity:
            expected["free"] = f"{gib(capacity - device.used_bytes):.2f}"
        assert shown == expected, group.get("data-device")
        for rect in rects:
            title = rect.find(f"{svg}title")
            assert title is not None and title.text is not None
            assert title.text.endswith(f": {rect.get('data-gib')} GiB")
        texts = {t.get("class"): t.text for t in group.iter(f"{svg}text")}
        # The same words as `llm-infra plan` prints beside its text bar.
        assert texts["usage"] == usage_text(device)
        label = texts["device-label"] or ""
        assert label.startswith(str(group.get("data-device")))
        if device.layers is not None:
            assert label.endswith(f" — {device.layers}")


def test_plan_picture_of_a_split_model_names_each_devices_layers() -> None:
    plan = stack_plan_of("strix-halo-pair-split")
    split = {name: device.layers for name, device in plan.devices.items()
             if name.startswith("vram")}  # fmt: skip
    assert len(split) == 2
    for name, layers in split.items():
        # The layer range in the picture is the one the plan's table gives for that device.
        assert any(row.component == f"weights ({layers})" for row in plan.rows), (name, layers)
    labels = [t.text for t in ElementTree.fromstring(
        (ROOT / "docs" / "strix-halo-pair-split.plan.svg").read_text()
    ).iter("{http://www.w3.org/2000/svg}text") if t.get("class") == "device-label"]  # fmt: skip
    assert f"vram — {split['vram']}" in labels


def test_plan_picture_shows_what_is_over_capacity() -> None:
    over = Device(90 * GIB, {"weights": 85 * GIB, "kv_cache": 4 * GIB, "compute": 3 * GIB})
    plan = Plan({"vram": over}, [], ["plan: does not fit"], [], [], "test")
    root = ElementTree.fromstring(plan_svg(plan, "over"))
    svg = "{http://www.w3.org/2000/svg}"
    marked = [r for r in root.iter(f"{svg}rect") if r.get("class") == "over"]
    assert [r.get("data-gib") for r in marked] == ["2.00"]
    assert not [r for r in root.iter(f"{svg}rect") if r.get("class") == "free"]
    texts = [t.text or "" for t in root.iter(f"{svg}text")]
    assert "92.0/90.0 GiB  over by 2.0 GiB" in texts
    assert "over: DOES NOT FIT" in texts
    assert plan_svg(plan, "over") == plan_svg(plan, "over")


def test_a_stale_plan_picture_fails_the_check(tmp_path: Path) -> None:
    page = tmp_path / "mi300x.md"
    assert docs("mi300x", "--output-file", str(page)).returncode == 0
    picture = tmp_path / "mi300x.plan.svg"
    assert picture.read_text() == (ROOT / "docs" / "mi300x.plan.svg").read_text()
    assert docs("mi300x", "--check", "--output-file", str(page)).returncode == 0
    picture.write_text(picture.read_text().replace("156.67", "150.00"))
    result = docs("mi300x", "--check", "--output-file", str(page))
    assert result.returncode == 1
    assert "mi300x.plan.svg is stale" in result.stderr


@pytest.mark.parametrize(
    ("stack", "extra"),
    [
        ("strix-halo", ["--tags", "a|b `c`", "-ub", "1024"]),
        ("mi300x", ["--response-role", "a|b `c`", "--enforce-eager"]),
    ],
)
def test_the_reference_lists_each_extra_argument_as_deployed(
    stack: str, extra: list[str], tmp_path: Path
) -> None:
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    document["config"]["llm-infra:server"]["extraArgs"] = extra
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(document))
    out = tmp_path / "reference.md"
    result = docs(str(path), "--output-file", str(out))
    assert result.returncode == 0, result.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| `")]
    option, value = extra[0], extra[1].replace("|", "\\|")
    assert f"| `{option}` | `` {value} `` | Passed as given (`server.extraArgs`). |" in rows
    last = next(row for row in rows if row.startswith(f"| `{extra[2]}` |"))
    assert last.endswith("| Passed as given (`server.extraArgs`). |")
    # A table row per argument: the `|` of a value did not split its row.
    assert all(row.count(" | ") + 1 == 3 for row in rows if "extraArgs" in row)


def test_the_reference_of_a_changed_stack_says_only_what_holds_for_it(tmp_path: Path) -> None:
    """Another architecture, another context, no alert rules: nothing of the reference stack's
    own text (deepseek4's K = V, its 64k a slot, its PrometheusRule) is left."""
    from tests.unit.test_plan_advice import QWEN3MOE

    document = yaml.safe_load((STACKS / "Pulumi.strix-halo.yaml").read_text())
    config = document["config"]
    config["llm-infra:model"].update(QWEN3MOE)
    config["llm-infra:model"]["repo"] = "Qwen/Qwen3-30B-A3B-GGUF"
    config["llm-infra:model"]["files"] = ["Qwen3-30B-A3B-Q4_K_M.gguf"]
    config["llm-infra:store"].pop("retiredPatterns")
    config["llm-infra:server"].update(
        contextSize=32768, parallel=2, minSlotContext=16384, gpuLayers=49,
        cacheTypeK="q8_0", cacheTypeV="f16",
    )  # fmt: skip
    config["llm-infra:metrics"]["rules"] = False
    path = tmp_path / "Pulumi.qwen.yaml"
    path.write_text(yaml.safe_dump(document))
    out = tmp_path / "qwen.md"
    result = docs(str(path), "--output-file", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "qwen3moe" in text and "deepseek4" not in text
    assert "64k" not in text and "65536" not in text
    assert "16384 tokens here" in text and "`server.minSlotContext`, 16384" in text
    alerts = text[text.index("## Alerts") :]
    assert "| Alert |" not in alerts and "metrics.rules: false" in alerts
    assert "PrometheusRule `" not in text and "alert use" not in text
    # The reference stack's page keeps its own: deepseek4's remark and its alerts.
    reference = (ROOT / "docs" / "strix-halo.md").read_text()
    assert "deepseek4 needs K = V" in reference and "| Alert |" in reference
