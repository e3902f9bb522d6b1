"""`llm-infra lock` against the local hub emulator, and how render and `pulumi up` use the lock."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.payloads.fetcher import FetchError, load_lock
from infra import program
from infra.config import ConfigError, FleetStack, read_stack_file
from infra.lock import model_source
from infra.render import run_program
from tests.conftest import ROOT
from tests.support.hub_emulator import COMMIT, Hub
from tests.support.lock_hub import NAMES, REPO, cli, stack_file, tiny_repo_hub


@pytest.fixture
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with tiny_repo_hub(tmp_path_factory.mktemp("src")) as served:
        yield served


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
    # The fetcher's ConfigMap (with replace, the server's objects are registered first).
    config_map = next(
        r
        for r in resources
        if r["type"] == "kubernetes:core/v1:ConfigMap" and "lock.json" in r["inputs"]["data"]
    )
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


def closed_endpoint() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_lock_with_the_hub_unreachable_exits_3_naming_the_endpoint_settings(
    tmp_path: Path,
) -> None:
    closed = closed_endpoint()
    result = cli(Hub(repos={}), "lock", str(stack_file(tmp_path)), "--endpoint", closed)
    assert result.returncode == 3, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "cannot reach" in line]
    assert line.startswith(f"model.repo: cannot reach {closed}")
    for setting in ("--endpoint", "store.hfEndpoint", "$HF_ENDPOINT", "$HF_TOKEN"):
        assert setting in line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "tiny.lock.json").exists()


def with_store_endpoint(path: Path, endpoint: str) -> Path:
    document = yaml.safe_load(path.read_text())
    document["config"]["llm-infra:store"]["hfEndpoint"] = endpoint
    path.write_text(yaml.safe_dump(document))
    return path


def test_lock_reads_the_hub_from_the_stacks_store_endpoint(hub: Hub, tmp_path: Path) -> None:
    path = with_store_endpoint(stack_file(tmp_path), hub.url)
    result = cli(None, "lock", str(path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tiny.lock.json").is_file()


def test_endpoint_option_over_store_endpoint_over_hf_endpoint(hub: Hub, tmp_path: Path) -> None:
    path = with_store_endpoint(stack_file(tmp_path), closed_endpoint())
    # The option wins over the stack's setting...
    assert cli(None, "lock", str(path), "--endpoint", hub.url).returncode == 0
    # ...and the stack's setting over the environment (which points at the working hub).
    result = cli(hub, "lock", str(path))
    assert result.returncode == 3 and "cannot reach" in result.stderr


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


def test_star_stays_in_its_folder_and_small_git_files_get_a_sha256(
    hub: Hub, tmp_path: Path
) -> None:
    path = stack_file(tmp_path, files=["UD-IQ1_M/*", "*.json"])
    result = cli(hub, "lock", str(path))
    assert result.returncode == 0, result.stderr
    lock = json.loads((tmp_path / "tiny.lock.json").read_text())
    entries = {f["path"]: f for f in lock["files"]}
    # `*.json` is the top-level config.json only, as a shell glob: not inference/config.json.
    assert sorted(entries) == sorted([*(f"UD-IQ1_M/{n}" for n in NAMES), "config.json"])
    small = entries["config.json"]
    assert small["sha256"] == hub.sha256(REPO, "config.json")
    assert small["size"] == len(hub.repos[REPO]["config.json"])
    assert all(f["sha256"] for f in lock["files"])


def test_two_repo_files_with_one_name_on_the_volume_are_refused_at_lock(
    hub: Hub, tmp_path: Path
) -> None:
    path = stack_file(tmp_path, files=["UD-IQ1_M/*", "*.json", "inference/*.json"])
    result = cli(hub, "lock", str(path))
    assert result.returncode == 2
    assert (
        "model.files: config.json and inference/config.json would both be 'config.json' on the "
        "volume" in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "tiny.lock.json").exists()


def test_a_hostile_name_in_the_repo_is_refused_at_lock(hub: Hub, tmp_path: Path) -> None:
    hub.repos[REPO]["UD-IQ1_M/x\nINJECTED.gguf"] = b"g" * 2000
    result = cli(hub, "lock", str(stack_file(tmp_path)))
    assert result.returncode == 2
    assert "is not a relative path inside the repo" in result.stderr
    assert not (tmp_path / "tiny.lock.json").exists()


def locked(hub: Hub, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    assert cli(hub, "lock", str(stack_file(tmp_path))).returncode == 0
    lock_path = tmp_path / "tiny.lock.json"
    return lock_path, json.loads(lock_path.read_text())


def other_quant(document: dict[str, Any], hub: Hub) -> None:
    path = "UD-Q2_K/Tiny-UD-Q2_K.gguf"
    document["files"] = [
        {
            "path": path,
            "name": path.rsplit("/", 1)[-1],
            "size": 4000,
            "sha256": hub.sha256(REPO, path),
        }
    ]


EDITS: list[tuple[str, Callable[[dict[str, Any], Hub], None], str]] = [
    ("only another quant", other_quant, "files[0]: 'UD-Q2_K/Tiny-UD-Q2_K.gguf' matches none of"),
    ("a shard missing", lambda d, h: d["files"].pop(1), "incomplete shard set"),
    ("a pattern with no file", lambda d, h: d.update(patterns=[*d["patterns"], "UD-IQ9/*"]),
     "patterns[1]: 'UD-IQ9/*' matches no file of the lock"),
    ("one file twice", lambda d, h: d["files"].append(dict(d["files"][0])), "would both be"),
    ("no sha256", lambda d, h: d["files"][2].update(sha256=None), "has no sha256; every"),
    ("a renamed file", lambda d, h: d["files"][0].update(name="model.gguf"),
     "is not the file name of path"),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "message"), [e[1:] for e in EDITS], ids=[e[0] for e in EDITS])
def test_a_lock_that_is_not_exactly_model_files_is_refused_at_render(
    hub: Hub, tmp_path: Path, edit: Callable[[dict[str, Any], Hub], None], message: str
) -> None:
    lock_path, document = locked(hub, tmp_path)
    edit(document, hub)
    lock_path.write_text(json.dumps(document))
    stack = read_stack_file(stack_file(tmp_path)).stack()
    assert not isinstance(stack, FleetStack)
    with pytest.raises(ConfigError) as caught:
        model_source(stack.model, lock_path, preview=True)
    (problem,) = caught.value.problems
    assert problem.startswith(f"{lock_path}: ") and message in problem, problem


def test_render_names_the_lock_problem_and_exits_2(hub: Hub, tmp_path: Path) -> None:
    lock_path, document = locked(hub, tmp_path)
    other_quant(document, hub)
    lock_path.write_text(json.dumps(document))
    result = cli(hub, "render", str(stack_file(tmp_path)), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "tiny.lock.json: files[0]: 'UD-Q2_K/Tiny-UD-Q2_K.gguf' matches none" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_lock_needs_only_the_model_of_a_stack_being_written(hub: Hub, tmp_path: Path) -> None:
    # A new stack: the model and an alias, nothing the plan or the server needs yet.
    document = {
        "config": {
            "llm-infra:target": "kubernetes",
            "llm-infra:model": {"repo": REPO, "revision": "main", "files": ["UD-IQ1_M/*"]},
            "llm-infra:server": {"alias": "tiny"},
        }
    }
    path = tmp_path / "Pulumi.tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    result = cli(hub, "lock", str(path))
    assert result.returncode == 0, result.stderr
    lock = json.loads((tmp_path / "tiny.lock.json").read_text())
    assert [f["name"] for f in lock["files"]] == NAMES
    # Render still wants the rest, and says which keys.
    render = cli(hub, "render", str(path), "--out", str(tmp_path / "out"))
    assert render.returncode == 2 and "is required" in render.stderr


def test_lock_names_a_bad_model_key_without_asking_for_the_rest(tmp_path: Path) -> None:
    document = {"config": {"llm-infra:model": {"repo": "not a repo", "files": []}}}
    path = tmp_path / "Pulumi.tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    result = cli(None, "lock", str(path))
    assert result.returncode == 2
    problems = result.stderr.splitlines()[1:]
    assert [p.split(":")[0] for p in problems] == ["model.repo", "model.files"], problems


def test_patterns_that_take_in_two_models_name_both(hub: Hub, tmp_path: Path) -> None:
    path = stack_file(tmp_path, files=["UD-IQ1_M/*", "UD-Q2_K/*"])
    result = cli(hub, "lock", str(path))
    assert result.returncode == 2
    (line,) = [p for p in result.stderr.splitlines() if p.startswith("model.files:")]
    assert line == (
        "model.files: the patterns take in 2 models, not one: 'UD-IQ1_M/Tiny-UD-IQ1_M-*.gguf' "
        "(3 shards), 'UD-Q2_K/Tiny-UD-Q2_K.gguf'; list the files (or a pattern) of the one to "
        "serve"
    )
    assert "is not a split shard" not in result.stderr


def test_a_pattern_that_matches_nothing_lists_the_repos_gguf_files(
    hub: Hub, tmp_path: Path
) -> None:
    result = cli(hub, "lock", str(stack_file(tmp_path, files="UD-Q2_K/Tiny-UD-Q3_K.gguf")))
    assert result.returncode == 2
    (line,) = [p for p in result.stderr.splitlines() if p.startswith("model.files[0]:")]
    assert "matches no file of unsloth/Tiny-GGUF@" in line
    assert "; nearest: 'UD-Q2_K/Tiny-UD-Q2_K.gguf', " in line
    assert "its GGUF files: 'UD-IQ1_M/Tiny-UD-IQ1_M-00001-of-00003.gguf', " in line
