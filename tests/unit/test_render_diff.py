"""The per-resource summary of a render diff: update versus replace as the providers decide."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from infra.render_diff import render_changes, resource_changes, summary

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def golden(stack: str) -> list[dict[str, Any]]:
    resources: list[dict[str, Any]] = json.loads((GOLDEN / stack / "resources.json").read_text())
    return resources


def find(resources: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in resources if r["type"].endswith(":" + kind))


def test_an_unchanged_render_has_no_resource_changes() -> None:
    assert resource_changes(golden("strix-halo"), golden("strix-halo")) == []
    assert summary([]) == "no resource changes\n"


def test_a_server_flag_is_an_update_that_restarts_the_pod_and_reloads_the_model() -> None:
    old = golden("strix-halo")
    new = copy.deepcopy(old)
    container = find(new, "Deployment")["inputs"]["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [*container["args"], "--verbose"]
    (change,) = resource_changes(old, new)
    assert change.line() == (
        "Deployment llm/deepseek-v4-flash-0731: update (pod restart, model reload)"
    )


def test_a_deployment_selector_change_is_a_replace_naming_the_field() -> None:
    old = golden("strix-halo")
    new = copy.deepcopy(old)
    find(new, "Deployment")["inputs"]["spec"]["selector"]["matchLabels"]["x"] = "y"
    (change,) = resource_changes(old, new)
    assert change.action == "replace"
    assert change.effects[0] == "replaced because spec.selector changed"


@pytest.mark.parametrize(
    ("kind", "path", "action"),
    [
        ("ConfigMap", ["data", "extra"], "replace"),
        ("ConfigMap", ["metadata", "labels", "extra"], "update"),
        ("Service", ["spec", "type"], "replace"),
        ("Service", ["metadata", "labels", "extra"], "update"),
        ("PersistentVolumeClaim", ["spec", "storageClassName"], "replace"),
    ],
)
def test_kubernetes_replace_on_change_fields(kind: str, path: list[str], action: str) -> None:
    old = golden("strix-halo")
    new = copy.deepcopy(old)
    target = find(new, kind)["inputs"]
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = "changed"
    (change,) = resource_changes(old, new)
    assert change.action == action


def test_a_command_is_updated_on_its_script_and_replaced_on_its_triggers() -> None:
    old = golden("mi300x")
    script = copy.deepcopy(old)
    up = next(r for r in script if r["name"] == "vllm-up")
    up["inputs"]["create"] += "\n# changed"
    (change,) = resource_changes(old, script)
    assert change.line() == "Command vllm-up: update (runs again on the host)"
    triggered = copy.deepcopy(old)
    next(r for r in triggered if r["name"] == "vllm-up")["inputs"]["triggers"] = ["x"]
    (change,) = resource_changes(old, triggered)
    assert change.action == "replace"
    assert change.effects[0] == "replaced because triggers changed"


def test_created_and_deleted_resources_and_the_totals(tmp_path: Path) -> None:
    old = golden("strix-halo")
    new = [r for r in old if not r["type"].endswith(":Service")]
    new.append({"type": "kubernetes:core/v1:ConfigMap", "name": "extra", "inputs": {}})
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    (tmp_path / "old" / "resources.json").write_text(json.dumps(old))
    (tmp_path / "new" / "resources.json").write_text(json.dumps(new))
    changes = render_changes(tmp_path / "old", tmp_path / "new")
    assert [(c.display, c.action) for c in changes] == [
        ("ConfigMap extra", "create"),
        (f"Service llm/{find(old, 'Service')['inputs']['metadata']['name']}", "delete"),
    ]
    assert summary(changes).endswith("resources: 1 to create, 1 to delete\n")
    # A stack new in this change: no old render, every resource created.
    assert {c.action for c in render_changes(tmp_path / "none", tmp_path / "new")} == {"create"}
