"""The fetcher script, run as the Job runs it, against a local hub emulator with faults."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.gguf_model_store import FETCHER_SOURCE, model_lock
from tests.hub_emulator import Hub, running_hub

REPO = "unsloth/Tiny-GGUF"
NAMES = [f"Tiny-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
PATHS = [f"UD-IQ1_M/{name}" for name in NAMES]


@pytest.fixture
def hub() -> Iterator[Hub]:
    rng = random.Random(7)
    files = {path: rng.randbytes(300_000 + i) for i, path in enumerate(PATHS)}
    files["UD-Q2_K/other.gguf"] = b"not selected"
    with running_hub(Hub(repos={REPO: files})) as served:
        yield served


def write_lock(tmp_path: Path, hub: Hub, with_hashes: bool = True, **overrides: object) -> Path:
    files = [
        {
            "path": path,
            "name": name,
            "size": len(hub.repos[REPO][path]) if with_hashes else None,
            "sha256": hub.sha256(REPO, path) if with_hashes else None,
        }
        for path, name in zip(PATHS, NAMES, strict=True)
    ]
    document = {**model_lock(REPO, "main", files), **overrides}  # type: ignore[arg-type]
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(document))
    return path


def run_fetcher(hub: Hub, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env["HF_ENDPOINT"] = hub.url
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, str(FETCHER_SOURCE), *args], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip


def fetch(
    hub: Hub, lock: Path, dest: Path, *extra: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_fetcher(hub, "fetch", "--lock", str(lock), "--dest", str(dest), *extra, token=token)


def check(hub: Hub, lock: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    return run_fetcher(hub, "check", "--lock", str(lock), "--dest", str(dest))


def file_gets(hub: Hub) -> list[tuple[str, str | None]]:
    return [(path, rng) for method, path, rng in hub.requests if method == "GET"]


def assert_complete(hub: Hub, dest: Path) -> None:
    for path, name in zip(PATHS, NAMES, strict=True):
        assert (dest / name).read_bytes() == hub.repos[REPO][path]
    assert not list(dest.glob(".*.part"))


def test_fetch_places_every_shard_and_the_check_passes(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    result = fetch(hub, lock, dest)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_complete(hub, dest)
    assert "all 3 files complete" in result.stdout
    assert check(hub, lock, dest).returncode == 0


def test_second_fetch_downloads_nothing(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    assert fetch(hub, lock, dest).returncode == 0
    hub.requests.clear()
    result = fetch(hub, lock, dest)
    assert result.returncode == 0
    assert file_gets(hub) == []
    assert result.stdout.count("already complete, skipped") == 3


def test_fetch_resumes_after_connection_drop(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.drop_after[PATHS[0]] = 100_000
    result = fetch(hub, lock, dest, "--parallel", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert_complete(hub, dest)
    first = [rng for path, rng in file_gets(hub) if path.endswith(PATHS[0])]
    assert first == [None, "bytes=100000-"]


def test_fetch_resumes_a_partial_file_left_by_a_killed_process(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    (dest / f".{NAMES[1]}.part").write_bytes(hub.repos[REPO][PATHS[1]][:123_456])
    assert fetch(hub, lock, dest).returncode == 0
    assert_complete(hub, dest)
    ranges = [rng for path, rng in file_gets(hub) if path.endswith(PATHS[1])]
    assert ranges == ["bytes=123456-"]


def test_dropped_download_never_appears_under_its_final_name(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.drop_after[PATHS[2]] = 5_000
    result = fetch(hub, lock, dest, "--retries", "0")
    assert result.returncode == 3, result.stdout
    assert not (dest / NAMES[2]).exists()
    assert (dest / f".{NAMES[2]}.part").stat().st_size == 5_000
    assert check(hub, lock, dest).returncode == 1


def test_retired_models_are_deleted_but_never_the_current_ones(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    (dest / "Qwen3.6-32B-Q4_K_M.gguf").write_bytes(b"old")
    (dest / "keep-me.txt").write_bytes(b"unrelated")
    assert fetch(hub, lock, dest).returncode == 0
    result = fetch(hub, lock, dest, "--retire", "Qwen3.6*.gguf", "--retire", "*.gguf")
    assert result.returncode == 0
    assert not (dest / "Qwen3.6-32B-Q4_K_M.gguf").exists()
    assert (dest / "keep-me.txt").exists()
    assert_complete(hub, dest)


def test_unknown_file_is_a_not_found_error(hub: Hub, tmp_path: Path) -> None:
    lock = write_lock(tmp_path, hub, repo="unsloth/No-Such-Repo")
    result = fetch(hub, lock, tmp_path / "models")
    assert result.returncode == 5
    assert "HTTP 404" in result.stdout


def test_gated_repo_without_token_is_an_auth_error_and_with_token_works(
    hub: Hub, tmp_path: Path
) -> None:
    hub.token = "hf_good"
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    result = fetch(hub, lock, dest)
    assert result.returncode == 4
    assert "set HF_TOKEN" in result.stdout
    assert "hf_good" not in result.stdout
    assert fetch(hub, lock, dest, token="hf_good").returncode == 0
    assert_complete(hub, dest)


def test_checksum_mismatch_discards_the_file(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.corrupt_once.add(PATHS[0])
    result = fetch(hub, lock, dest, "--parallel", "1")
    assert result.returncode == 6
    assert "does not match the lock" in result.stdout
    assert not (dest / NAMES[0]).exists()
    assert not (dest / f".{NAMES[0]}.part").exists()


def test_not_enough_disk_fails_before_downloading(hub: Hub, tmp_path: Path) -> None:
    lock = write_lock(tmp_path, hub)
    document = json.loads(lock.read_text())
    document["files"][0]["size"] = 10**18
    lock.write_text(json.dumps(document))
    result = fetch(hub, lock, tmp_path / "models")
    assert result.returncode == 7
    assert "GiB still needed" in result.stdout
    assert file_gets(hub) == []


def test_check_fails_without_marker_and_on_a_missing_shard(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    assert check(hub, lock, dest).returncode == 1
    assert fetch(hub, lock, dest).returncode == 0
    (dest / NAMES[2]).unlink()
    result = check(hub, lock, dest)
    assert result.returncode == 1
    assert f"{NAMES[2]}: missing" in result.stdout


def test_lock_without_sizes_still_fetches_by_name(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub, with_hashes=False), tmp_path / "models"
    assert fetch(hub, lock, dest).returncode == 0
    assert_complete(hub, dest)
