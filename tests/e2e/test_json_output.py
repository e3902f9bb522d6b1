"""Every `-o json` prints one document of the shape its schema in docs/json/ documents."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT
from tests.support.hub_emulator import Hub
from tests.support.lock_hub import cli, stack_file, tiny_repo_hub

SCHEMAS = ROOT / "docs" / "json"


def valid(name: str, stdout: str) -> dict[str, Any]:
    """The output parsed, after checking it against docs/json/NAME.schema.json."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    document: dict[str, Any] = json.loads(stdout)
    jsonschema.Draft202012Validator(schema).validate(document)
    return document


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with tiny_repo_hub(tmp_path_factory.mktemp("src")) as served:
        yield served


def test_every_schema_is_one_commands_output() -> None:
    assert sorted(p.name for p in SCHEMAS.iterdir()) == sorted(
        f"{name}.schema.json"
        for name in ("render", "plan", "lock", "check-model", "check-litellm", "diff", "tune")
    )


def test_lock_render_check_model_and_check_litellm_json(hub: Hub, tmp_path: Path) -> None:
    stack = stack_file(tmp_path)
    locked = cli(hub, "lock", str(stack), "-o", "json")
    assert locked.returncode == 0, locked.stderr
    (entry,) = valid("lock", locked.stdout)["locks"]
    assert entry["change"] == "created" and entry["files"] == 3
    assert Path(entry["path"]) == tmp_path / "tiny.lock.json"

    out = tmp_path / "out"
    rendered = cli(hub, "render", str(stack), "--out", str(out), "-o", "json")
    assert rendered.returncode == 0, rendered.stderr
    summary = valid("render", rendered.stdout)
    # A locked stack warns of nothing but its store.upgrade: replace (the preview states the
    # server's downtime on a model change).
    assert summary["stack"] == "tiny"
    assert all("store.upgrade: replace" in w for w in summary["warnings"]), summary["warnings"]
    assert summary["resources"] == len(json.loads((out / "resources.json").read_text()))

    models = tmp_path / "models"
    fetch_lock = tmp_path / "fetch.json"
    data = json.loads((out / "resources.json").read_text())
    config_map = next(
        r
        for r in data
        if r["type"] == "kubernetes:core/v1:ConfigMap" and "lock.json" in r["inputs"]["data"]
    )
    fetch_lock.write_text(config_map["inputs"]["data"]["lock.json"])
    missing = cli(
        hub, "check-model", "--lock", str(fetch_lock), "--dest", str(models), "-o", "json"
    )
    assert missing.returncode == 1
    assert valid("check-model", missing.stdout)["complete"] is False
    assert cli(hub, "fetch", "--lock", str(fetch_lock), "--dest", str(models)).returncode == 0
    complete = cli(
        hub, "check-model", "--lock", str(fetch_lock), "--dest", str(models), "-o", "json"
    )
    assert complete.returncode == 0
    assert valid("check-model", complete.stdout) == {
        "complete": True, "lock": str(fetch_lock), "dest": str(models), "files": 3, "problems": []
    }  # fmt: skip

    outputs = json.loads((out / "outputs.json").read_text())
    litellm = tmp_path / "litellm.yaml"
    litellm.write_text(yaml.safe_dump({"model_list": [outputs["litellmModel"]]}))
    routed = cli(hub, "check-litellm", str(litellm), "--stack", str(stack), "-o", "json")
    assert routed.returncode == 0, routed.stderr
    document = valid("check-litellm", routed.stdout)
    assert document["routed"] is True and document["routes"][0]["routed"] is True
    litellm.write_text(yaml.safe_dump({"model_list": []}))
    unrouted = cli(hub, "check-litellm", str(litellm), "--stack", str(stack), "-o", "json")
    assert unrouted.returncode == 1
    assert valid("check-litellm", unrouted.stdout)["routes"][0]["errors"]


@pytest.mark.parametrize("flag", [["-o", "json"], ["--json"]])
def test_plan_json(hub: Hub, flag: list[str]) -> None:
    result = cli(hub, "plan", "strix-halo", *flag)
    assert result.returncode == 0, result.stderr
    assert valid("plan", result.stdout)["fits"] is True


def test_the_mi300x_plan_json_carries_the_kv_cache_in_tokens(hub: Hub) -> None:
    result = cli(hub, "plan", "mi300x", "-o", "json")
    assert result.returncode == 0, result.stderr
    kv = valid("plan", result.stdout)["kv_cache"]
    assert kv["max_model_len"] == 262144 and kv["gpu_tokens"] > 4_000_000
    assert kv["max_concurrency"] == round(kv["gpu_tokens"] / 262144, 2)


def test_diff_json(hub: Hub, tmp_path: Path) -> None:
    old = tmp_path / "a" / "strix-halo"
    shutil.copytree(ROOT / "tests/golden/strix-halo", old)
    new = tmp_path / "b" / "strix-halo"
    shutil.copytree(old, new)
    text = (new / "manifests.yaml").read_text()
    (new / "manifests.yaml").write_text(text.replace("replicas: 1", "replicas: 2", 1))
    args = ["diff", "--renders", str(old), str(new), "-o", "json"]
    result = cli(hub, *args)
    assert result.returncode == 1, result.stderr
    document = valid("diff", result.stdout)
    assert document["changed"] is True and "+  replicas: 2" in document["diff"]
    same = cli(hub, "diff", "--renders", str(old), str(old), "-o", "json")
    assert same.returncode == 0
    assert valid("diff", same.stdout) == {"changed": False, "resources": [], "diff": ""}
