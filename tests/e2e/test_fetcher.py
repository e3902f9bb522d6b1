"""The fetcher script, run as the Job runs it, against a local hub emulator with faults."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from components.payloads import FETCHER_SOURCE, fetcher
from components.payloads.fetcher import FetchError, Lock, fetch_document, load_lock
from components.payloads.fetcher import fetch as fetch_files
from tests.support.hub_emulator import Hub, run_fetcher, running_hub
from tests.support.upgrade import check_model

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
    document = {**fetch_document(REPO, "main", files), **overrides}  # type: ignore[arg-type]
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(document))
    return path


def fetch(
    hub: Hub, lock: Path, dest: Path, *extra: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_fetcher(hub, "fetch", "--lock", str(lock), "--dest", str(dest), *extra, token=token)


def start_fetcher(
    hub: Hub, lock: Path, dest: Path, stdout: int, *extra: str
) -> subprocess.Popen[str]:
    """The fetcher as a background process, as a Job pod runs it."""
    env = {**os.environ, "HF_ENDPOINT": hub.url}
    command = [
        sys.executable,
        str(FETCHER_SOURCE),
        "fetch",
        "--lock",
        str(lock),
        "--dest",
        str(dest),
        *extra,
    ]
    return subprocess.Popen(command, env=env, stdout=stdout, text=True)


def quota(capacity: int) -> Callable[[Path], int]:
    """Free space of a disk of `capacity` bytes holding what is in the directory now."""
    return lambda dest: capacity - sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())


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
    # The check as the server's init container runs it: the script, in a process of its own.
    check = run_fetcher(hub, "check", "--lock", str(lock), "--dest", str(dest))
    assert check.returncode == 0, check.stdout + check.stderr


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
    assert check_model(lock, dest).returncode == 1


def test_retired_models_are_deleted_but_never_the_current_ones(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    (dest / "Qwen3.6-32B-Q4_K_M.gguf").write_bytes(b"old")
    (dest / "keep-me.txt").write_bytes(b"unrelated")
    assert fetch(hub, lock, dest).returncode == 0
    result = fetch(hub, lock, dest, "--retire", "Qwen3.6*.gguf")
    assert result.returncode == 0, result.stdout
    assert "retired Qwen3.6-32B-Q4_K_M.gguf (3 bytes)" in result.stdout
    assert not (dest / "Qwen3.6-32B-Q4_K_M.gguf").exists()
    assert (dest / "keep-me.txt").exists()
    assert_complete(hub, dest)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("*.gguf", "matches Tiny-UD-IQ1_M-00001-of-00003.gguf, a file of the current model"),
        ("Tiny-*", "a file of the current model"),
        ("*", "matches any file name"),
        ("?*", "matches any file name"),
        ("sub/*.gguf", "is not a file-name pattern"),
    ],
)
def test_a_retire_pattern_matching_the_lock_or_everything_is_refused_before_any_delete(
    hub: Hub, tmp_path: Path, pattern: str, message: str
) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    (dest / "Qwen3.6-32B-Q4_K_M.gguf").write_bytes(b"old")
    result = fetch(hub, lock, dest, "--retire", "Qwen3.6*.gguf", "--retire", pattern)
    assert result.returncode == 2, result.stdout
    assert message in result.stdout and "nothing was deleted" in result.stdout
    assert (dest / "Qwen3.6-32B-Q4_K_M.gguf").exists()
    assert file_gets(hub) == []


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


def test_corrupt_bytes_are_detected_and_downloaded_again(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.corrupt_once.add(PATHS[0])
    result = fetch(hub, lock, dest, "--parallel", "1")
    assert result.returncode == 0, result.stdout
    assert "does not match the lock's" in result.stdout and "downloading it again" in result.stdout
    assert_complete(hub, dest)
    assert len([p for p, _ in file_gets(hub) if p.endswith(PATHS[0])]) == 2


def test_persistent_corruption_fails_with_nothing_under_the_final_name(
    hub: Hub, tmp_path: Path
) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.corrupt_always.add(PATHS[0])
    result = fetch(hub, lock, dest, "--parallel", "1")
    assert result.returncode == 6
    assert "does not match the lock" in result.stdout
    assert not (dest / NAMES[0]).exists()
    assert not (dest / f".{NAMES[0]}.part").exists()
    assert check_model(lock, dest).returncode == 1


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
    assert check_model(lock, dest).returncode == 1
    assert fetch(hub, lock, dest).returncode == 0
    (dest / NAMES[2]).unlink()
    result = check_model(lock, dest)
    assert result.returncode == 1
    assert f"{NAMES[2]}: missing" in result.stdout


def test_lock_without_sizes_still_fetches_by_name(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub, with_hashes=False), tmp_path / "models"
    assert fetch(hub, lock, dest).returncode == 0
    assert_complete(hub, dest)


def test_complete_set_is_verified_once_then_trusted_by_record(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    for path, name in zip(PATHS, NAMES, strict=True):
        # As an older tool left them: complete files, no verified-hash records.
        (dest / name).write_bytes(hub.repos[REPO][path])
    first = fetch(hub, lock, dest)
    assert first.returncode == 0
    assert first.stdout.count("verifying the existing file") == 3
    assert file_gets(hub) == []
    second = fetch(hub, lock, dest)
    assert "verifying" not in second.stdout
    assert second.stdout.count("already complete, skipped") == 3


def test_a_wrong_file_under_a_final_name_is_replaced(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    dest.mkdir()
    good = hub.repos[REPO][PATHS[1]]
    (dest / NAMES[1]).write_bytes(bytes(len(good)))
    result = fetch(hub, lock, dest)
    assert result.returncode == 0
    assert "the existing file has sha256" in result.stdout
    assert "downloading the lock's file; the existing one stays until the switch" in result.stdout
    assert_complete(hub, dest)


def test_kill_mid_download_then_rerun_transfers_only_what_was_missing(
    hub: Hub, tmp_path: Path
) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    total = sum(len(hub.repos[REPO][p]) for p in PATHS)
    hub.throttle_bytes_per_s = 400_000
    process = start_fetcher(hub, lock, dest, subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while sum(hub.bytes_sent.values()) < total // 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()
    process.wait()
    on_disk = sum((dest / n).stat().st_size if (dest / n).exists() else 0 for n in NAMES) + sum(
        p.stat().st_size for p in dest.glob(".*.part")
    )
    assert 0 < on_disk < total
    hub.throttle_bytes_per_s = None
    hub.bytes_sent.clear()
    assert fetch(hub, lock, dest).returncode == 0
    assert_complete(hub, dest)
    second = sum(hub.bytes_sent.values())
    # Resumed with Range: the second run moves what was missing, give or take one in-flight chunk.
    assert abs(second - (total - on_disk)) <= 3 * 64 * 1024, (second, total - on_disk)


def test_two_fetchers_at_once_do_not_corrupt_each_other(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.pause()
    # The first fetcher holds the directory's lock from before its first request to its end:
    # with its one download held by the hub, it is mid-fetch for as long as the test wants.
    first = start_fetcher(hub, lock, dest, subprocess.PIPE, "--parallel", "1")
    assert hub.wait_held(1), "the first fetcher never asked for a file"
    second = start_fetcher(hub, lock, dest, subprocess.PIPE)
    assert second.stdout is not None
    # The second either says it waits for the lock, or (with no lock) asks the hub for files.
    said_waiting, lines = threading.Event(), []

    def read_second() -> None:
        for line in second.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "another fetcher holds this directory; waiting" in line:
                said_waiting.set()

    reader = threading.Thread(target=read_second, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not said_waiting.is_set() and len(file_gets(hub)) == 1 and time.monotonic() < deadline:
        said_waiting.wait(0.02)
    asked_meanwhile = file_gets(hub)[1:]
    hub.resume()
    out_first, _ = first.communicate(timeout=60)
    second.wait(timeout=60)
    reader.join(timeout=60)
    out_second = "".join(lines)
    assert said_waiting.is_set(), out_second
    assert asked_meanwhile == [], "the second fetcher downloaded while the first held the lock"
    assert first.returncode == second.returncode == 0, out_first + out_second
    assert out_second.count("already complete, skipped") == 3
    assert_complete(hub, dest)


@contextlib.contextmanager
def an_older_model_beside(hub: Hub, tmp_path: Path) -> Iterator[tuple[Lock, Path, int, Path]]:
    """The lock, its destination holding a 200 kB file of an older model, the bytes the lock
    needs and that older file; the fetcher's hub at HF_ENDPOINT meanwhile."""
    lock = load_lock(write_lock(tmp_path, hub))
    needed = sum(f.get("size") or 0 for f in lock.files)
    dest = tmp_path / "models"
    dest.mkdir()
    old = dest / "Qwen3.6-32B-Q4_K_M.gguf"
    old.write_bytes(b"x" * 200_000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_ENDPOINT", hub.url)
        yield lock, dest, needed, old


def test_replace_deletes_retired_files_first_only_when_they_make_room(
    hub: Hub, tmp_path: Path
) -> None:
    with an_older_model_beside(hub, tmp_path) as (lock, dest, needed, old):
        with pytest.raises(FetchError) as short:
            fetch_files(
                lock, dest, 1, ["Qwen3.6*.gguf"], free_space=lambda _: needed - 300_000,
                upgrade="replace",
            )  # fmt: skip
        assert short.value.exit_code == 7
        assert "200000 bytes in retired files" in str(short.value)
        assert old.exists(), "a retired model must stay while the new one cannot fit"
        assert file_gets(hub) == []
        # A disk of needed + 100 kB: what the old file frees is free once it is deleted.
        fetch_files(
            lock, dest, 1, ["Qwen3.6*.gguf"], free_space=quota(needed + 100_000),
            upgrade="replace",
        )  # fmt: skip
    assert not old.exists()
    assert_complete(hub, dest)


def test_keep_never_deletes_before_the_new_set_is_verified_even_when_that_would_fit(
    hub: Hub, tmp_path: Path
) -> None:
    with (
        an_older_model_beside(hub, tmp_path) as (lock, dest, needed, old),
        pytest.raises(FetchError) as short,
    ):
        fetch_files(lock, dest, 1, ["Qwen3.6*.gguf"], free_space=lambda _: needed - 100_000)
    assert short.value.exit_code == 7
    message = str(short.value)
    assert "200000 bytes in old files, kept until the new model is verified" in message
    assert "store.upgrade: replace" in message and "nothing was deleted" in message
    assert old.exists()
    assert file_gets(hub) == []


def test_server_errors_are_retried_with_backoff(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.status_once[PATHS[0]] = [503]
    result = fetch(hub, lock, dest, "--parallel", "1")
    assert result.returncode == 0, result.stdout
    assert "HTTP 503; retry 1/5 in 1s" in result.stdout
    assert_complete(hub, dest)


def test_not_found_is_not_retried(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    hub.status_once[PATHS[0]] = [404, 404]
    result = fetch(hub, lock, dest, "--parallel", "1")
    assert result.returncode == 5
    assert "retry" not in result.stdout
    assert hub.status_once[PATHS[0]] == [404]


def test_progress_lines_give_bytes_of_total_rate_eta_and_shard(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = iter([100.0, 106.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    progress = fetcher.Progress(total=87 * 2**30, already=10 * 2**30, shards=3, every=5, tty=False)
    progress.begin(2)
    progress.add(150 * 2**20)
    line = capsys.readouterr().out
    assert line.endswith(" 10.1/87.0 GiB (11%)  25.0 MiB/s  ETA 52m  shard 2/3\n"), line


def fetch_a_wrong_size(
    hub: Hub, tmp_path: Path, delta: int
) -> tuple[subprocess.CompletedProcess[str], int]:
    """Fetch into tmp_path/models with a lock whose first file is `delta` bytes off the size
    the hub serves: the fetch, and that size."""
    lock, actual = write_lock(tmp_path, hub), len(hub.repos[REPO][PATHS[0]])
    document = json.loads(lock.read_text())
    document["files"][0]["size"] = actual + delta
    lock.write_text(json.dumps(document))
    return fetch(hub, lock, tmp_path / "models", "--parallel", "1"), actual


@pytest.mark.parametrize("delta", [1, -1])
def test_a_wrong_size_in_the_lock_is_one_request_and_the_size_error(
    hub: Hub, tmp_path: Path, delta: int
) -> None:
    result, actual = fetch_a_wrong_size(hub, tmp_path, delta)
    assert result.returncode == 8, result.stdout
    assert (
        f"the hub serves {actual} bytes for {PATHS[0]}, the lock says {actual + delta}"
        in result.stdout
    )
    assert "retry" not in result.stdout and "downloading it again" not in result.stdout
    assert [p for p, _ in file_gets(hub) if p.endswith(PATHS[0])] == [
        f"/{REPO}/resolve/main/{PATHS[0]}"
    ]
    dest = tmp_path / "models"
    # Refused on the headers: not a byte of the body was kept.
    assert not (dest / NAMES[0]).exists() and not (dest / f".{NAMES[0]}.part").exists()


@pytest.mark.parametrize("delta", [1, -1])
def test_a_wrong_size_is_caught_without_a_length_header_after_one_download(
    hub: Hub, tmp_path: Path, delta: int
) -> None:
    hub.omit_length.add(PATHS[0])
    result, actual = fetch_a_wrong_size(hub, tmp_path, delta)
    assert result.returncode == 8, result.stdout
    if delta > 0:
        assert f"the hub serves {actual} bytes" in result.stdout
    else:
        # Never read past the lock's size: the body is cut there, not read to its end.
        assert f"goes on past the {actual - 1} bytes" in result.stdout
        assert f"the lock says {actual - 1} bytes for {PATHS[0]}" in result.stdout
    assert "downloading it again" not in result.stdout
    # One body: a short file is asked once more from its end, and the 416 names its size.
    assert hub.bytes_sent[PATHS[0]] == actual
    assert not (tmp_path / "models" / NAMES[0]).exists()


def test_a_small_git_file_is_verified_by_its_sha256(hub: Hub, tmp_path: Path) -> None:
    hub.repos[REPO]["tokenizer_config.json"] = b'{"chat_template": "{{ messages }}"}'
    document = json.loads(write_lock(tmp_path, hub).read_text())
    document["files"].append(
        {
            "path": "tokenizer_config.json",
            "name": "tokenizer_config.json",
            "size": len(hub.repos[REPO]["tokenizer_config.json"]),
            "sha256": hub.sha256(REPO, "tokenizer_config.json"),
        }
    )
    lock, dest = tmp_path / "lock.json", tmp_path / "models"
    lock.write_text(json.dumps(document))
    hub.corrupt_always.add("tokenizer_config.json")
    result = fetch(hub, lock, dest)
    assert result.returncode == 6, result.stdout
    assert "tokenizer_config.json: sha256" in result.stdout
    assert not (dest / "tokenizer_config.json").exists()
    hub.corrupt_always.clear()
    assert fetch(hub, lock, dest).returncode == 0
    assert (dest / "tokenizer_config.json").read_bytes() == hub.repos[REPO]["tokenizer_config.json"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"path": f"other/{NAMES[1]}", "name": NAMES[1]}, "would both be"),
        ({"path": PATHS[0], "name": "renamed.gguf"}, "is not the file name of path"),
        ({"path": PATHS[0], "name": ""}, "is not a plain file name"),
        ({"path": "../../etc/x.gguf", "name": "x.gguf"}, "is not a relative path"),
    ],
)
def test_a_lock_naming_one_file_twice_or_a_hostile_name_is_refused(
    hub: Hub, tmp_path: Path, change: dict[str, str], message: str
) -> None:
    lock = write_lock(tmp_path, hub)
    document = json.loads(lock.read_text())
    document["files"][2].update(change)
    lock.write_text(json.dumps(document))
    result = fetch(hub, lock, tmp_path / "models")
    assert result.returncode == 2
    assert "files[2]: " in result.stdout and message in result.stdout
    assert file_gets(hub) == []


class _YieldingStdout:
    """A stdout that lets another thread run between any two writes (as a busy pod does)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0.0005)
        self.chunks.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_log_lines_from_parallel_downloads_never_run_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _YieldingStdout()
    monkeypatch.setattr(sys, "stdout", out)
    messages = [f"file-{t}-{i}.gguf: complete ({i} bytes)" for t in range(4) for i in range(25)]

    def worker(t: int) -> None:
        for message in messages[25 * t : 25 * (t + 1)]:
            fetcher.log(message)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = "".join(out.chunks).splitlines()
    # One line per message, each whole: "<timestamp> <message>".
    assert sorted(line.split(" ", 1)[1] for line in lines) == sorted(messages)
