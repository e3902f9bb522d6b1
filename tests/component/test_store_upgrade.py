"""The model store's upgrade settings and node preflight, through the whole program under mocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.model_store.node_preflight import preflight_script
from infra import program
from infra.config import ConfigError, read_stack_file
from infra.lock import model_source
from infra.render import Rendered, run_program
from infra.targets.registry import stack_plan
from tests.conftest import STACKS, strix

GIB = 1 << 30
PATHS = [f"UD-IQ1_M/DeepSeek-V4-Flash-0731-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
SIZES = [30 * GIB, 30 * GIB, 27 * GIB]


def stack_path(
    tmp_path: Path,
    store: dict[str, Any],
    files: list[str] | None = None,
    *,
    replace_store: bool = False,
) -> Path:
    """strix-halo with store settings changed (or replaced), and a lock of its three shards."""
    document = yaml.safe_load((STACKS / "Pulumi.strix-halo.yaml").read_text())
    config = document["config"]
    if replace_store:
        config["llm-infra:store"] = store
    else:
        config["llm-infra:store"].update(store)
    patterns = files or PATHS
    config["llm-infra:model"]["files"] = patterns
    lock = {
        "version": 1,
        "repo": config["llm-infra:model"]["repo"],
        "revision": "0123456789abcdef0123456789abcdef01234567",
        "requested_revision": "main",
        "patterns": patterns,
        "files": [
            {"path": p, "name": p.rsplit("/", 1)[-1], "size": s, "sha256": f"{i}" * 64}
            for i, (p, s) in enumerate(zip(PATHS, SIZES, strict=True))
        ],
    }
    (tmp_path / "strix-halo.lock.json").write_text(json.dumps(lock))
    path = tmp_path / "Pulumi.strix-halo.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def render(path: Path) -> Rendered:
    stack_file = read_stack_file(path)
    return run_program(program.main, stack_file.config, stack_file.secret_keys, stack="strix-halo")


def resources(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rendered.resources}


def fetch_argv(rendered: Rendered) -> list[str]:
    job = resources(rendered)["models-fetch"]
    command: list[str] = job["inputs"]["spec"]["template"]["spec"]["containers"][0]["command"]
    return command


def test_the_node_preflight_runs_on_the_server_node_in_its_image_before_the_fetch(
    tmp_path: Path,
) -> None:
    rendered = render(stack_path(tmp_path, {"nodePreflight": True, "upgrade": "keep"}))
    found = resources(rendered)
    job = found["models-preflight"]
    assert job["type"] == "kubernetes:batch/v1:Job" and job["parent"] == "models"
    assert "models-preflight" in found["models-fetch"]["options"]["dependsOn"]
    pod = job["inputs"]["spec"]["template"]["spec"]
    deployment = found["deepseek-v4-flash-0731-deployment"]["inputs"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == deployment["nodeSelector"]
    (container,) = pod["containers"]
    assert container["image"] == deployment["containers"][0]["image"]
    names = [p.rsplit("/", 1)[-1] for p in PATHS]
    expected = preflight_script(
        files=list(zip(names, SIZES, strict=True)),
        min_gpu_memory_bytes=90 * GIB,
        check_devices=True,
        retired=["Qwen3.6*.gguf"],
        replace=False,
        cpu_variant="zen4",  # memory.nodeCpu: zen5
    )
    assert container["command"] == ["bash", "-c", expected]
    assert job["inputs"]["metadata"]["name"].startswith("models-node-")
    # It needs no network: a NetworkPolicy closes both ways for its pod.
    closed = found["models-preflight-closed"]["inputs"]["spec"]
    assert (
        closed["podSelector"]["matchLabels"]
        == job["inputs"]["spec"]["template"]["metadata"]["labels"]
    )
    assert closed["ingress"] == closed["egress"] == []


def test_no_preflight_unless_asked_and_keep_is_the_fetchers_default(tmp_path: Path) -> None:
    store = yaml.safe_load((STACKS / "Pulumi.strix-halo.yaml").read_text())["config"]
    store = {
        k: v for k, v in store["llm-infra:store"].items() if k not in ("upgrade", "nodePreflight")
    }
    rendered = render(stack_path(tmp_path, store, replace_store=True))
    assert "models-preflight" not in resources(rendered)
    assert "--upgrade" not in fetch_argv(rendered)


def test_replace_reaches_the_fetcher_and_the_preflight(tmp_path: Path) -> None:
    rendered = render(stack_path(tmp_path, {"upgrade": "replace", "nodePreflight": True}))
    assert fetch_argv(rendered)[-2:] == ["--upgrade", "replace"]
    script = resources(rendered)["models-preflight"]["inputs"]["spec"]["template"]["spec"][
        "containers"
    ][0]["command"][2]
    assert "in retired files (store.upgrade: replace)" in script


@pytest.mark.parametrize(
    ("files", "pattern", "message"),
    [
        # Exact model.files: the config itself is refused.
        (None, "DeepSeek-V4-Flash-0731-*.gguf", "a file of the current model"),
        # A pattern resolved by the lock: refused once the lock names the files.
        (["UD-IQ1_M/*"], "*UD-IQ1_M*", "a file of the current model"),
        (["UD-IQ1_M/*"], "*", "matches any file name"),
    ],
)
def test_a_retire_pattern_that_would_delete_the_model_is_refused_at_render(
    tmp_path: Path, files: list[str] | None, pattern: str, message: str
) -> None:
    path = stack_path(tmp_path, {"retiredPatterns": ["Qwen3.6*.gguf", pattern]}, files)
    with pytest.raises(ConfigError) as caught:
        render(path)
    (problem,) = caught.value.problems
    assert problem.startswith(f"store.retiredPatterns[1]: {pattern!r} ") and message in problem


def plan_advice(tmp_path: Path, store: dict[str, Any]) -> list[str]:
    path = stack_path(tmp_path, store)
    stack = strix(
        {k.split(":", 1)[1]: v for k, v in yaml.safe_load(path.read_text())["config"].items()}
    )
    source = model_source(stack.model, tmp_path / "strix-halo.lock.json", preview=True)
    return stack_plan(stack, source).advice


def test_the_plan_says_when_the_volume_cannot_hold_the_old_and_the_new_model(
    tmp_path: Path,
) -> None:
    (line,) = [
        a for a in plan_advice(tmp_path, {"upgrade": "keep"}) if a.startswith("store.upgrade")
    ]
    assert line == (
        "store.upgrade: keep holds the old and the new model during an upgrade, but the volume "
        "cannot: 176.4 GiB needed (2 x model files 87.0 GiB, reserve 2.4 GiB) of 120.0 GiB; "
        "raise store.size to at least 178Gi, or set store.upgrade: replace to accept the "
        "downtime (the old files go first)"
    )
    for store in ({"upgrade": "replace"}, {"upgrade": "keep", "size": "180Gi"}):
        assert not [a for a in plan_advice(tmp_path, store) if a.startswith("store.upgrade")]
