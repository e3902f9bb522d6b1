"""`llm-infra render`: the golden snapshot, determinism, and the CLI's handling of bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
CONTRACT_FILES = ("resources.json", "manifests.yaml", "outputs.json")
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


@pytest.mark.parametrize("name", CONTRACT_FILES)
def test_render_matches_golden_snapshot(strix_halo_render: Path, name: str) -> None:
    golden = GOLDEN / "strix-halo" / name
    actual = (strix_halo_render / name).read_text()
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual)
    assert golden.is_file(), f"no snapshot {golden}: run with LLM_INFRA_UPDATE_GOLDEN=1"
    assert actual == golden.read_text(), (
        f"the render of strix-halo changed ({name}); review the diff and, if intended, "
        "refresh the snapshot with LLM_INFRA_UPDATE_GOLDEN=1"
    )


def test_render_is_byte_identical_across_runs(strix_halo_render: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert render("strix-halo", again, seed="12345").returncode == 0
    for name in CONTRACT_FILES:
        assert (again / name).read_bytes() == (strix_halo_render / name).read_bytes(), name


def test_render_writes_every_kubernetes_object_in_dependency_order(strix_halo_render: Path) -> None:
    documents = list(yaml.safe_load_all((strix_halo_render / "manifests.yaml").read_text()))
    kinds = [d["kind"] for d in documents]
    assert kinds == [
        "Namespace", "NetworkPolicy", "NetworkPolicy", "ConfigMap", "PersistentVolumeClaim",
        "Job", "Deployment", "Service",
    ]  # fmt: skip
    assert all(d["metadata"]["namespace"] == "llm" for d in documents[1:])


def test_render_accepts_a_stack_file_path_and_defaults_out_dir(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", str(STACK_FILE)],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "rendered" / "strix-halo" / "manifests.yaml").is_file()
    assert "11 resources, 8 Kubernetes objects" in result.stdout


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
