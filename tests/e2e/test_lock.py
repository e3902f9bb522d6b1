"""`llm-infra lock` against the local hub emulator, and how render and `pulumi up` use the lock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from components.payloads.fetcher import FetchError, load_lock
from infra import program
from infra.config import ConfigError, read_stack_file
from infra.render import run_program
from tests.conftest import ROOT
from tests.support.hub_emulator import COMMIT, Hub, running_hub
from tests.support.tiny_gguf import write_tiny_split_model

REPO = "unsloth/Tiny-GGUF"
NAMES = [f"Tiny-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    shards = write_tiny_split_model(tmp_path_factory.mktemp("src"), "Tiny-UD-IQ1_M", shards=3)
    files = {f"UD-IQ1_M/{p.name}": p.read_bytes() for p in shards}
    files["UD-Q2_K/Tiny-UD-Q2_K.gguf"] = b"q" * 4000
    files["README.md"] = b"# tiny\n"
    with running_hub(Hub(repos={REPO: files})) as served:
        yield served


def stack_file(
    tmp_path: Path, repo: str = REPO, files: str = "UD-IQ1_M/*", rev: str = "main"
) -> Path:
    """The strix-halo stack pointed at the tiny 2-layer llama model of the emulator."""
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text())
    config = document["config"]
    model = config["llm-infra:model"]
    model.update(repo=repo, revision=rev, files=[files], architecture="llama", layers=2)
    model.pop("metadata")
    config["llm-infra:server"]["gpuLayers"] = 3
    path = tmp_path / "Pulumi.tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def cli(hub: Hub, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_OFFLINE")}
    env["HF_ENDPOINT"] = hub.url
    env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *args], capture_output=True, text=True, env=env,
        cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip


def test_lock_resolves_commit_files_sizes_and_sha256(hub: Hub, tmp_path: Path) -> None:
    result = cli(hub, "lock", str(stack_file(tmp_path)))
    assert result.returncode == 0, result.stderr
    lock = json.loads((tmp_path / "tiny.lock.json").read_text())
    assert lock["revision"] == COMMIT
    assert lock["requested_revision"] == "main"
    assert [f["name"] for f in lock["files"]] == NAMES
    for entry in lock["files"]:
        data = hub.repos[REPO][entry["path"]]
        assert entry["size"] == len(data)
        assert entry["sha256"] == hub.sha256(REPO, entry["path"])
    assert "(created)" in result.stdout
    again = cli(hub, "lock", str(stack_file(tmp_path)))
    assert "(unchanged)" in again.stdout


def test_render_reads_the_lock(hub: Hub, tmp_path: Path) -> None:
    path = stack_file(tmp_path)
    assert cli(hub, "lock", str(path)).returncode == 0
    out = tmp_path / "out"
    result = cli(hub, "render", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    outputs = json.loads((out / "outputs.json").read_text())
    assert outputs["modelRevision"] == COMMIT
    resources = json.loads((out / "resources.json").read_text())
    config_map = next(r for r in resources if r["type"] == "kubernetes:core/v1:ConfigMap")
    fetched = json.loads(config_map["inputs"]["data"]["lock.json"])
    assert fetched["revision"] == COMMIT
    assert [f["sha256"] for f in fetched["files"]] == [
        hub.sha256(REPO, f"UD-IQ1_M/{n}") for n in NAMES
    ]
    deployment = next(r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment")
    args = deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[1] == f"/models/{NAMES[0]}"


def test_a_stale_lock_stops_the_render(hub: Hub, tmp_path: Path) -> None:
    assert cli(hub, "lock", str(stack_file(tmp_path))).returncode == 0
    path = stack_file(tmp_path, rev=COMMIT)
    result = cli(hub, "render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "model: the lock" in result.stderr and "llm-infra lock STACK" in result.stderr


def test_pulumi_up_refuses_an_unlocked_model(tmp_path: Path) -> None:
    stack_file = read_stack_file(ROOT / "stacks" / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    config["llm-infra:lockFile"] = str(tmp_path / "missing.lock.json")
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config, secret_keys, stack="strix-halo", preview=False)
    assert "`pulumi up` deploys only locked models" in caught.value.problems[0]


@pytest.mark.parametrize(
    ("repo", "files", "rev", "message"),
    [
        ("unsloth/Nope", "UD-IQ1_M/*", "main", "model.repo: 'unsloth/Nope' not found"),
        (REPO, "UD-IQ1_M/*", "v9", "model.revision: 'v9' is not a branch, tag or commit"),
        (REPO, "UD-IQ9/*", "main", "model.files[0]: 'UD-IQ9/*' matches no file"),
    ],
)
def test_lock_errors_name_the_key(
    hub: Hub, tmp_path: Path, repo: str, files: str, rev: str, message: str
) -> None:
    result = cli(hub, "lock", str(stack_file(tmp_path, repo=repo, files=files, rev=rev)))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "tiny.lock.json").exists()


def test_lock_of_a_gated_repo_needs_a_token(hub: Hub, tmp_path: Path) -> None:
    hub.token = "hf_secret_token"
    path = stack_file(tmp_path)
    result = cli(hub, "lock", str(path))
    assert result.returncode == 2
    assert "is gated or private" in result.stderr and "HF_TOKEN" in result.stderr
    ok = cli(hub, "lock", str(path), token="hf_secret_token")
    assert ok.returncode == 0, ok.stderr
    assert "hf_secret_token" not in (tmp_path / "tiny.lock.json").read_text()


def test_lock_refuses_a_shard_set_with_a_missing_part(hub: Hub, tmp_path: Path) -> None:
    del hub.repos[REPO][f"UD-IQ1_M/{NAMES[1]}"]
    result = cli(hub, "lock", str(stack_file(tmp_path)))
    assert result.returncode == 2
    assert "model.files: incomplete shard set, -00002-of-00003 absent" in result.stderr


def test_lock_records_the_gguf_header_summary_from_range_reads(hub: Hub, tmp_path: Path) -> None:
    path = stack_file(tmp_path)
    result = cli(hub, "lock", str(path))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "tiny.lock.json").read_text())["gguf"]
    assert summary["architecture"] == "llama"
    assert len(summary["layer_bytes"]) == 2
    for name in NAMES:
        data = hub.repos[REPO][f"UD-IQ1_M/{name}"]
        # Only the header was read: far less than the file, never its tensor data.
        assert hub.bytes_sent[f"UD-IQ1_M/{name}"] < len(data) // 2
    planned = cli(hub, "plan", str(path))
    assert "weights from: lock summary" in planned.stdout
    assert "weights (2 of 2 layers + output)" in planned.stdout


def test_a_lock_of_another_architecture_is_refused(hub: Hub, tmp_path: Path) -> None:
    path = stack_file(tmp_path)
    assert cli(hub, "lock", str(path)).returncode == 0
    document = yaml.safe_load(path.read_text())
    document["config"]["llm-infra:model"]["architecture"] = "deepseek4"
    path.write_text(yaml.safe_dump(document))
    result = cli(hub, "render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert (
        "model.architecture: 'deepseek4', but the locked GGUF header says 'llama'" in result.stderr
    )


def test_lock_with_the_hub_unreachable_is_one_line_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = cli(Hub(repos={}), "lock", str(stack_file(tmp_path)), "--endpoint", closed)
    assert result.returncode == 2
    assert f"model.repo: cannot reach {closed}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "tiny.lock.json").exists()


def test_the_lock_file_is_what_the_fetcher_reads(hub: Hub, tmp_path: Path) -> None:
    # One model-file shape: the stack's lock is itself a document the fetcher accepts.
    assert cli(hub, "lock", str(stack_file(tmp_path))).returncode == 0
    lock_path = tmp_path / "tiny.lock.json"
    fetched = load_lock(lock_path)
    document = json.loads(lock_path.read_text())
    assert list(fetched.files) == document["files"]
    assert fetched.revision == COMMIT


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"path": "../../../etc/x.gguf", "name": "x.gguf"}, "is not a relative path"),
        ({"path": "/etc/x.gguf", "name": "x.gguf"}, "is not a relative path"),
        ({"path": "a.gguf", "name": ""}, "is not a plain file name"),
        ({"path": "a.gguf", "name": "../x.gguf"}, "is not a plain file name"),
        ({"path": "a.gguf", "name": "a\nb.gguf"}, "is not a plain file name"),
        ({"path": "a.gguf", "name": "a.gguf", "size": -1}, "is not a byte count"),
    ],
)
def test_a_lock_entry_that_could_escape_the_volume_stops_the_render(
    hub: Hub, tmp_path: Path, entry: dict[str, object], problem: str
) -> None:
    assert cli(hub, "lock", str(stack_file(tmp_path))).returncode == 0
    lock_path = tmp_path / "tiny.lock.json"
    document = json.loads(lock_path.read_text())
    document["files"][0] = entry
    lock_path.write_text(json.dumps(document))
    result = cli(hub, "render", str(stack_file(tmp_path)), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "tiny.lock.json: files[0]: " in result.stderr and problem in result.stderr
    assert "Traceback" not in result.stderr
    with pytest.raises(FetchError, match=problem):
        load_lock(lock_path)
