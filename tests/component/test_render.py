"""`llm-infra render`: the golden snapshot, determinism, and the CLI's handling of bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
STACK_FILE = ROOT / "stacks" / "Pulumi.strix-halo.yaml"
UPDATE = os.environ.get("LLM_INFRA_UPDATE_GOLDEN") == "1"


def render(
    stack: str, out: Path, cwd: Path = ROOT, seed: str = "0"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", stack, "--out", str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": seed},
        check=False,
    )


@pytest.fixture(scope="module")
def strix_halo_render(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render") / "strix-halo"
    result = render("strix-halo", out)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def mi300x_render(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render") / "mi300x"
    result = render("mi300x", out)
    assert result.returncode == 0, result.stderr
    return out


FLEET_STACKS = ["strix-halo-pair", "strix-halo-pair-split"]
"""The example stacks of several servers and of a split model."""


@pytest.fixture(scope="module")
def fleet_renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    renders = {}
    for stack in FLEET_STACKS:
        out = tmp_path_factory.mktemp("render") / stack
        result = render(stack, out)
        assert result.returncode == 0, result.stderr
        renders[stack] = out
    return renders


def rendered_files(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("stack", ["strix-halo", "mi300x", *FLEET_STACKS])
def test_render_matches_golden_snapshot(
    stack: str, strix_halo_render: Path, mi300x_render: Path, fleet_renders: dict[str, Path]
) -> None:
    renders = {"strix-halo": strix_halo_render, "mi300x": mi300x_render, **fleet_renders}
    actual = rendered_files(renders[stack])
    golden_dir = GOLDEN / stack
    if UPDATE:
        if golden_dir.exists():
            shutil.rmtree(golden_dir)
        for name, content in actual.items():
            (golden_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / name).write_bytes(content)
    assert golden_dir.is_dir(), f"no snapshot {golden_dir}: run with LLM_INFRA_UPDATE_GOLDEN=1"
    golden = rendered_files(golden_dir)
    assert sorted(actual) == sorted(golden), f"the files rendered for {stack} changed"
    for name, content in actual.items():
        assert content == golden[name], (
            f"the render of {stack} changed ({name}); review the diff and, if intended, "
            "refresh the snapshot with LLM_INFRA_UPDATE_GOLDEN=1"
        )


def test_mi300x_render_writes_files_and_commands(mi300x_render: Path) -> None:
    files = rendered_files(mi300x_render)
    assert {"files/opt/llm/compose.yaml", "files/opt/llm/Caddyfile"} <= set(files)
    commands = sorted(name for name in files if name.startswith("commands/"))
    assert commands[0] == "commands/01-vllm-preflight.sh"
    assert commands[-1].endswith("-vllm-check.sh")
    assert not (mi300x_render / "manifests.yaml").exists()
    outputs = json.loads(files["outputs.json"])
    assert outputs["url"] == "https://llm.example.com"
    assert outputs["servedModelName"] == "deepseek-v4-flash-0731"
    assert outputs["litellmModel"]["litellm_params"]["api_base"] == "https://llm.example.com/v1"
    assert outputs["plan"]["fits"] is True


def test_mi300x_commands_are_plain_scripts_and_resources_keep_the_command_that_runs_them(
    mi300x_render: Path,
) -> None:
    from components.vllm.host_scripts import remote_command

    resources = json.loads((mi300x_render / "resources.json").read_text())
    commands = [r for r in resources if r["type"] == "command:remote:Command"]
    scripts = sorted((mi300x_render / "commands").iterdir())
    assert [p.name for p in scripts] == [
        f"{index:02d}-{r['name']}.sh" for index, r in enumerate(commands, start=1)
    ]
    for path, resource in zip(scripts, commands, strict=True):
        script = path.read_text()
        assert script.startswith("#!/usr/bin/env bash\nset -euo pipefail\n"), path.name
        assert "LLM_INFRA_SCRIPT" not in script, path.name
        # resources.json holds what pulumi-command runs over SSH: this script, wrapped.
        assert resource["inputs"]["create"] == remote_command(script), path.name


def test_mi300x_files_with_comments_start_with_the_generated_header(mi300x_render: Path) -> None:
    from components.vllm.builders import generated_header

    header = generated_header("mi300x").encode()
    files = {
        name: content
        for name, content in rendered_files(mi300x_render).items()
        if name.startswith("files/")
    }
    assert {"files/opt/llm/compose.yaml", "files/opt/llm/Caddyfile"} <= set(files)
    for name, content in files.items():
        if name.endswith(".json"):
            assert b"Generated by llm-infra" not in content, name
        else:
            assert content.startswith(header), name


def test_render_is_byte_identical_across_runs(
    strix_halo_render: Path, mi300x_render: Path, tmp_path: Path
) -> None:
    for stack, first in (("strix-halo", strix_halo_render), ("mi300x", mi300x_render)):
        again = tmp_path / stack
        assert render(stack, again, seed="12345").returncode == 0
        assert rendered_files(again) == rendered_files(first), stack


def test_render_writes_every_kubernetes_object_in_dependency_order(strix_halo_render: Path) -> None:
    documents = list(yaml.safe_load_all((strix_halo_render / "manifests.yaml").read_text()))
    kinds = [d["kind"] for d in documents]
    assert kinds == [
        "Namespace", "NetworkPolicy", "NetworkPolicy", "ConfigMap", "ConfigMap", "ConfigMap",
        "PersistentVolumeClaim", "Job", "Deployment", "Service", "PrometheusRule",
        "ServiceMonitor",
    ]  # fmt: skip
    assert all(d["metadata"]["namespace"] == "llm" for d in documents[1:])


def test_render_accepts_a_stack_file_path_and_defaults_out_dir(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", str(STACK_FILE)],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "rendered" / "strix-halo" / "manifests.yaml").is_file()
    assert "15 resources, 12 Kubernetes objects" in result.stdout


def _bad_stack(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    assert old in text
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (
            "gpuLayers: 40",
            "gpuLayers: 45",
            "server.gpuLayers: 45 is more than the model's 43 layers",
        ),
        (
            "contextSize: 65536",
            "contextSize: 4096",
            "server.contextSize: 4096 is below the required",
        ),
        ("cacheTypeV: q8_0", "cacheTypeV: q4_0", "server.cacheTypeV: 'q4_0' differs from"),
        ("threads: 8", "threads: 8\n    treads: 8", "server.treads: unknown key"),
    ],
)
def test_invalid_stack_exits_2_naming_the_key_and_writes_nothing(
    tmp_path: Path, old: str, new: str, line: str
) -> None:
    out = tmp_path / "rendered" / "bad"
    result = render(str(_bad_stack(tmp_path, old, new)), out)
    assert result.returncode == 2
    assert line in result.stderr.splitlines()[1]
    assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists()


def test_missing_stack_exits_2(tmp_path: Path) -> None:
    result = render("no-such-stack", tmp_path / "out")
    assert result.returncode == 2
    assert "no stack file" in result.stderr and "Traceback" not in result.stderr
