"""`llm-infra lock` of a fleet against the hub emulator: one lock per model, used by render."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.hub_emulator import Hub, running_hub
from tests.support.lock_hub import cli
from tests.support.tiny_gguf import write_tiny_split_model

FIRST, SECOND = "unsloth/Tiny-GGUF", "unsloth/Other-Tiny-GGUF"


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    repos = {}
    for repo, prefix in ((FIRST, "Tiny-UD-IQ1_M"), (SECOND, "Other-UD-IQ1_M")):
        shards = write_tiny_split_model(tmp_path_factory.mktemp("src"), prefix, shards=3)
        repos[repo] = {f"UD-IQ1_M/{p.name}": p.read_bytes() for p in shards}
    with running_hub(Hub(repos=repos)) as served:
        yield served


def fleet_file(tmp_path: Path) -> Path:
    """strix-halo-pair with three servers: two replicas of one tiny model, one of another."""
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.strix-halo-pair.yaml").read_text())
    servers: list[dict[str, Any]] = document["config"]["llm-infra:servers"]
    third = json.loads(json.dumps(servers[1]))
    third.update(name="other", alias="other-tiny", nodeSelector={"kubernetes.io/hostname": "c"})
    third["store"]["name"] = "models-other"
    servers.append(third)
    for server, repo in zip(servers, (FIRST, FIRST, SECOND), strict=True):
        server["gpuLayers"] = 3
        server["model"].update(repo=repo, files=["UD-IQ1_M/*"], architecture="llama", layers=2)
        server["model"].pop("metadata")
    path = tmp_path / "Pulumi.fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_fleet_locks_each_model_once_and_renders_from_the_locks(hub: Hub, tmp_path: Path) -> None:
    path = fleet_file(tmp_path)
    result = cli(hub, "lock", str(path))
    assert result.returncode == 0, result.stderr
    first = json.loads((tmp_path / "fleet.lock.json").read_text())
    second = json.loads((tmp_path / "fleet.other.lock.json").read_text())
    assert first["repo"] == FIRST and second["repo"] == SECOND
    assert sorted(p.name for p in tmp_path.glob("*.lock.json")) == [
        "fleet.lock.json",
        "fleet.other.lock.json",
    ]
    out = tmp_path / "out"
    result = cli(hub, "render", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    outputs = json.loads((out / "outputs.json").read_text())
    revisions = {name: server["modelRevision"] for name, server in outputs["servers"].items()}
    assert revisions == {
        "deepseek-v4-flash-0731": first["revision"],
        "deepseek-v4-flash-0731-b": first["revision"],
        "other": second["revision"],
    }
    paths = {name: server["modelPath"] for name, server in outputs["servers"].items()}
    assert paths["other"] == "/models/Other-UD-IQ1_M-00001-of-00003.gguf"
    assert paths["deepseek-v4-flash-0731-b"] == "/models/Tiny-UD-IQ1_M-00001-of-00003.gguf"
