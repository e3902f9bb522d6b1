"""`store.upgrade: replace` across pods: the old server is gone before the fetch Job may delete
its model, as the render shows it (dependencies and options), and the preview says so."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.llamacpp.manifests import MODEL_ANNOTATION
from tests.conftest import ROOT, stack_values
from tests.support.cli import run_cli

SERVER = "deepseek-v4-flash-0731"


def rendered(tmp_path: Path, upgrade: str) -> tuple[dict[str, dict[str, Any]], str]:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["store"]["upgrade"] = upgrade
    stack = tmp_path / f"Pulumi.{upgrade}.yaml"
    config = {f"llm-infra:{key}": value for key, value in values.items()}
    stack.write_text(yaml.safe_dump({"config": config}))
    out = tmp_path / "out"
    result = run_cli(["render", str(stack), "--out", str(out)], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    resources = json.loads((out / "resources.json").read_text())
    return {r["name"]: r for r in resources}, result.stderr + result.stdout


@pytest.fixture(scope="module")
def replace(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]], str]:
    return rendered(tmp_path_factory.mktemp("replace"), "replace")


def test_with_replace_the_fetch_waits_for_the_server_not_the_other_way(
    replace: tuple[dict[str, dict[str, Any]], str],
) -> None:
    resources, _ = replace
    deployment, job = resources[f"{SERVER}-deployment"], resources["models-fetch"]
    assert f"{SERVER}-deployment" in job["options"]["dependsOn"]
    assert "models-fetch" not in deployment["options"].get("dependsOn", [])
    assert "models" not in deployment["options"].get("dependsOn", [])


def test_with_replace_a_new_model_deletes_the_old_deployment_before_the_new_one(
    replace: tuple[dict[str, dict[str, Any]], str],
) -> None:
    resources, _ = replace
    deployment = resources[f"{SERVER}-deployment"]
    options = deployment["options"]
    assert options["deleteBeforeReplace"] is True
    assert options["replaceOnChanges"] == [f'metadata.annotations["{MODEL_ANNOTATION}"]']
    annotations = deployment["inputs"]["metadata"]["annotations"]
    # The annotation is the fetcher ConfigMap, named after the lock: a new lock replaces it.
    assert (
        annotations[MODEL_ANNOTATION] == resources["models-fetcher"]["inputs"]["metadata"]["name"]
    )
    # Not awaited: its pod waits in the init check for the model the fetch then puts in place.
    assert annotations["pulumi.com/skipAwait"] == "true"


def test_with_replace_the_preview_states_the_downtime(
    replace: tuple[dict[str, dict[str, Any]], str],
) -> None:
    _, output = replace
    assert "store.upgrade: replace: a new model stops the server first" in output
    assert "the server is down until the new model is fetched and loaded" in output


def test_with_keep_the_server_waits_for_the_fetch_and_is_updated_in_place(
    tmp_path: Path,
) -> None:
    resources, output = rendered(tmp_path, "keep")
    deployment, job = resources[f"{SERVER}-deployment"], resources["models-fetch"]
    assert "models-fetch" in deployment["options"]["dependsOn"]
    assert f"{SERVER}-deployment" not in job["options"]["dependsOn"]
    assert "deleteBeforeReplace" not in deployment["options"]
    assert "replaceOnChanges" not in deployment["options"]
    assert "pulumi.com/skipAwait" not in deployment["inputs"]["metadata"]["annotations"]
    assert "store.upgrade: replace" not in output
