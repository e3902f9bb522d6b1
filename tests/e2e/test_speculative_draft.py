"""A speculative draft model end to end on the local hub emulator: `llm-infra lock` pins it in
the stack's lock beside the model, `plan` counts it, `render` ships its lock to the fetch Job
(fetched after the model into `draft/`) and its check to the server, which drafts with it; the
real fetcher fetches and checks it there, and the model's fetch never touches it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.hub_emulator import COMMIT, Hub, running_hub
from tests.support.lock_hub import REPO, cli, stack_file
from tests.support.tiny_gguf import DEFAULT_SPEC, write_tiny_model_seeded, write_tiny_split_model

DRAFT_REPO = "unsloth/Tiny-Draft-GGUF"
DRAFT = "Tiny-Draft-00001-of-00001.gguf"


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    work = tmp_path_factory.mktemp("src")
    shards = write_tiny_split_model(work, "Tiny-UD-IQ1_M", shards=3)
    # The model's own first layer with its embeddings and output: a draft of the same vocab.
    draft = write_tiny_model_seeded(work / "d", "Tiny-Draft", 1, DEFAULT_SPEC, keep_layers=1)[0]
    repos = {
        REPO: {f"UD-IQ1_M/{p.name}": p.read_bytes() for p in shards},
        DRAFT_REPO: {draft.name: draft.read_bytes(), "README.md": b"# draft\n"},
    }
    with running_hub(Hub(repos=repos)) as served:
        yield served


def with_draft(path: Path, spec: dict[str, Any] | None) -> Path:
    document = yaml.safe_load(path.read_text())
    server = document["config"]["llm-infra:server"]
    if spec is None:
        server.pop("speculative", None)
    else:
        server["speculative"] = spec
    path.write_text(yaml.safe_dump(document))
    return path


SPEC = {
    "method": "draft-simple",
    "numSpeculativeTokens": 4,
    "draft": {"repo": DRAFT_REPO, "files": ["*.gguf"]},
}


def locked(hub: Hub, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path = with_draft(stack_file(tmp_path), SPEC)
    result = cli(hub, "lock", str(path))
    assert result.returncode == 0, result.stderr
    assert f"with the draft {DRAFT_REPO}@{COMMIT}" in result.stdout
    return path, json.loads((tmp_path / "tiny.lock.json").read_text())


def test_lock_pins_the_draft_beside_the_model(hub: Hub, tmp_path: Path) -> None:
    _, lock = locked(hub, tmp_path)
    draft = lock["draft"]
    assert (draft["repo"], draft["revision"], draft["patterns"]) == (DRAFT_REPO, COMMIT, ["*.gguf"])
    assert [f["name"] for f in draft["files"]] == [DRAFT]
    assert draft["files"][0]["sha256"] == hub.sha256(DRAFT_REPO, DRAFT)
    assert draft["gguf"]["architecture"] == "llama" and len(draft["gguf"]["layer_bytes"]) == 1
    assert "draft" not in draft


def test_the_plan_counts_the_locked_drafts_weights_kv_and_compute(hub: Hub, tmp_path: Path) -> None:
    path, _ = locked(hub, tmp_path)
    planned = cli(hub, "plan", str(path), "-v")
    assert planned.returncode == 0, planned.stderr
    (row,) = [line for line in planned.stdout.splitlines() if "speculative draft" in line]
    # Its weights, an f16 KV cache of the target's context and a compute buffer, on the GPU.
    assert "(weights " in row and ", f16 KV " in row and ", compute " in row, row
    assert row.rstrip().endswith("VRAM"), row


def test_render_fetches_checks_and_serves_the_draft(hub: Hub, tmp_path: Path) -> None:
    path, lock = locked(hub, tmp_path)
    out = tmp_path / "out"
    result = cli(hub, "render", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    resources = json.loads((out / "resources.json").read_text())
    config_map = next(
        r for r in resources
        if r["type"] == "kubernetes:core/v1:ConfigMap" and "lock.json" in r["inputs"]["data"]
    )  # fmt: skip
    draft_lock = json.loads(config_map["inputs"]["data"]["draft-lock.json"])
    assert (draft_lock["repo"], draft_lock["revision"]) == (DRAFT_REPO, COMMIT)
    assert draft_lock["files"] == [
        {k: f[k] for k in ("path", "name", "size", "sha256")} for f in lock["draft"]["files"]
    ]
    job = next(
        r for r in resources
        if r["type"] == "kubernetes:batch/v1:Job" and "-fetch-" in r["inputs"]["metadata"]["name"]
    )  # fmt: skip
    pod = job["inputs"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch"]
    (draft_fetch,) = pod["containers"]
    assert "--retire" not in draft_fetch["command"]
    assert draft_fetch["command"][4:8] == [
        "/opt/llm-infra/draft-lock.json", "--dest", "/models/draft", "--parallel",
    ]  # fmt: skip
    deployment = next(r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment")
    spec = deployment["inputs"]["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["model-check", "draft-check"]
    args = spec["containers"][0]["args"]
    at = args.index("--spec-draft-model")
    assert args[at + 1] == f"/models/draft/{DRAFT}"
    assert args[args.index("--spec-type") + 1] == "draft-simple"


def fetcher(
    hub: Hub, action: str, lock: Path, dest: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    env["HF_ENDPOINT"] = hub.url
    argv = [sys.executable, "-m", "infra.cli", action, "--lock", str(lock), "--dest", str(dest)]
    return subprocess.run(
        [*argv, *extra], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def test_the_real_fetcher_fetches_the_draft_into_its_folder_and_the_models_fetch_spares_it(
    hub: Hub, tmp_path: Path
) -> None:
    path, _ = locked(hub, tmp_path)
    out = tmp_path / "out"
    assert cli(hub, "render", str(path), "--out", str(out)).returncode == 0
    resources = json.loads((out / "resources.json").read_text())
    data = next(
        r["inputs"]["data"] for r in resources
        if r["type"] == "kubernetes:core/v1:ConfigMap" and "draft-lock.json" in r["inputs"]["data"]
    )  # fmt: skip
    (tmp_path / "lock.json").write_text(data["lock.json"])
    (tmp_path / "draft-lock.json").write_text(data["draft-lock.json"])
    volume = tmp_path / "models"
    # As the Job runs them: the model first, then the draft into its folder.
    first = fetcher(hub, "fetch", tmp_path / "lock.json", volume)
    assert first.returncode == 0, first.stderr
    draft = fetcher(hub, "fetch", tmp_path / "draft-lock.json", volume / "draft")
    assert draft.returncode == 0, draft.stderr
    assert (volume / "draft" / DRAFT).read_bytes() == hub.repos[DRAFT_REPO][DRAFT]
    # The model's fetch retires by name in the model's folder only: a retired pattern that
    # names the draft's files deletes an old copy beside the model, never the draft's.
    (volume / "Tiny-Draft-old.gguf").write_bytes(b"old")
    again = fetcher(hub, "fetch", tmp_path / "lock.json", volume, "--retire", "Tiny-Draft*")
    assert again.returncode == 0, again.stderr
    assert not (volume / "Tiny-Draft-old.gguf").exists()
    assert (volume / "draft" / DRAFT).read_bytes() == hub.repos[DRAFT_REPO][DRAFT]
    checked = fetcher(hub, "check-model", tmp_path / "draft-lock.json", volume / "draft")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_lock_without_the_stacks_draft_is_stale(hub: Hub, tmp_path: Path) -> None:
    path, _ = locked(hub, tmp_path)
    with_draft(path, {**SPEC, "draft": {"repo": REPO, "files": ["UD-IQ1_M/*-00001-of-00003.gguf"]}})
    result = cli(hub, "render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lock = tmp_path / "tiny.lock.json"
    assert f"server.speculative.draft: the lock's draft {lock} was made for {DRAFT_REPO}" in (
        result.stderr
    )
    with_draft(path, None)
    result = cli(hub, "render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert f"server.speculative.draft: the lock {lock} pins the draft {DRAFT_REPO}" in (
        result.stderr
    )
