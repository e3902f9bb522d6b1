"""`llm-infra fetch` as a person runs it: Ctrl-C, progress in a log and on a terminal, resume."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.payloads.fetcher import fetch_document
from tests.conftest import ROOT
from tests.support.cli import as_at_a_terminal
from tests.support.hub_emulator import Hub, running_hub

REPO = "unsloth/Tiny-GGUF"
SIZE = 3 * 2**20
PATHS = [f"UD-IQ1_M/Tiny-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
TOTAL = 3 * SIZE
# `2026-12-03T20:11:43 2.1/9.0 MiB (23%)  4.0 MiB/s  ETA 2s  shards 1,2/3`
PROGRESS = re.compile(
    r"(?P<done>\d+\.\d)/(?P<total>\d+\.\d) MiB \((?P<pct>\d+)%\)  (?P<rate>\d+\.\d) MiB/s  "
    r"ETA (?P<eta>\d+s|\d+m\d\ds|\d+m|\?)  shards? (?P<shards>\d(,\d)*)/3"
)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d (?P<message>.*)$")


@pytest.fixture
def hub() -> Iterator[Hub]:
    rng = random.Random(25)
    files = {path: rng.randbytes(SIZE) for path in PATHS}
    # 3 MiB/s per connection: a 9 MiB set takes a few seconds, long enough to interrupt.
    with running_hub(Hub(repos={REPO: files}, throttle_bytes_per_s=3 * 2**20)) as served:
        yield served


def write_lock(tmp_path: Path, hub: Hub) -> Path:
    files = [
        {"path": p, "name": p.rsplit("/", 1)[1], "size": SIZE, "sha256": hub.sha256(REPO, p)}
        for p in PATHS
    ]
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(fetch_document(REPO, "main", files)))  # type: ignore[arg-type]
    return path


def fetch_argv(hub: Hub, lock: Path, dest: Path, *extra: str) -> list[str]:
    """`llm-infra fetch` with the hub given by --endpoint (no HF_ENDPOINT in the environment)."""
    return [
        sys.executable, "-m", "infra.cli", "fetch", "--lock", str(lock), "--dest", str(dest),
        "--endpoint", hub.url, *extra,
    ]  # fmt: skip


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("HF_ENDPOINT", "HF_TOKEN")}


def part_bytes(dest: Path) -> int:
    return sum(p.stat().st_size for p in dest.glob(".*.part")) if dest.is_dir() else 0


def messages(stdout: str) -> list[str]:
    """The log lines' messages, each checked to carry its timestamp."""
    found = []
    for line in stdout.splitlines():
        match = LOG_LINE.match(line)
        assert match, f"not a log line: {line!r}"
        found.append(match["message"])
    return found


def test_ctrl_c_stops_at_once_keeps_the_bytes_and_the_next_run_resumes(
    hub: Hub, tmp_path: Path
) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    argv = fetch_argv(hub, lock, dest, "--parallel", "1")
    with as_at_a_terminal():
        process = subprocess.Popen(
            argv, cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while part_bytes(dest) < 2**20 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    stdout, stderr = process.communicate(timeout=30)
    stopped_after = time.monotonic() - sent

    assert process.returncode == 130, stdout + stderr
    assert stopped_after < 2.0, f"Ctrl-C took {stopped_after:.1f}s"
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    last = messages(stdout)[-1]
    kept = re.fullmatch(
        rf"interrupted: (\d+\.\d)/9\.0 MiB \((\d+)%\) kept in {re.escape(str(dest))}; run the "
        r"same command again to resume \(kept bytes stay\)",
        last,
    )
    assert kept, last
    on_disk = part_bytes(dest) + sum(p.stat().st_size for p in dest.glob(".*.ready"))
    assert on_disk >= 2**20
    assert abs(float(kept[1]) - on_disk / 2**20) <= 0.1

    hub.bytes_sent.clear()
    hub.throttle_bytes_per_s = None
    again = subprocess.run(argv, cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    resent = sum(hub.bytes_sent.values())
    assert resent <= TOTAL - on_disk + TOTAL // 100, (resent, on_disk)
    resumed = next(m for m in messages(again.stdout) if m.startswith("resuming: "))
    assert resumed.startswith(f"resuming: {on_disk / 2**20:.1f}/9.0 MiB ("), resumed
    for path in PATHS:
        name = path.rsplit("/", 1)[1]
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == hub.sha256(REPO, path)


def test_a_log_gets_a_progress_line_every_interval_counting_the_whole_set(
    hub: Hub, tmp_path: Path
) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    # One file already there: a resumed set counts it as done from the first line on.
    dest.mkdir()
    first = PATHS[0].rsplit("/", 1)[1]
    (dest / f".{first}.part").write_bytes(hub.repos[REPO][PATHS[0]])
    result = subprocess.run(
        fetch_argv(hub, lock, dest, "--progress-every", "0.3", "--parallel", "2"),
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = messages(result.stdout)
    assert (
        "resuming: 3.0/9.0 MiB (33%) already on disk (0 of 3 files verified, 1 partly downloaded)"
        in lines
    )
    progress = [m for line in lines if (m := PROGRESS.fullmatch(line))]
    assert len(progress) >= 2, lines
    percents = [int(m["pct"]) for m in progress]
    assert percents == sorted(percents) and percents[0] >= 33
    assert all(float(m["done"]) <= float(m["total"]) == 9.0 for m in progress)
    done = lines[-1]
    assert re.fullmatch(
        r"done: 9\.0 MiB in \d+s, 6\.0 MiB downloaded at \d+\.\d MiB/s "
        r"\(3\.0 MiB were already on disk\)",
        done,
    ), done


def read_pty(fd: int, process: subprocess.Popen[bytes]) -> str:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif process.poll() is not None:
            break
    return b"".join(chunks).decode()


def test_a_terminal_gets_one_progress_line_updated_in_place(hub: Hub, tmp_path: Path) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        fetch_argv(hub, lock, dest, "--parallel", "1"),
        cwd=ROOT, env=clean_env(), stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    try:
        screen = read_pty(leader, process)
    finally:
        os.close(leader)
    assert process.wait(timeout=60) == 0, screen
    # Each update returns to the start of the line and clears it: no new line, no timestamp.
    updates = screen.split("\r\x1b[K")[1:]
    shown = [PROGRESS.match(update) for update in updates]
    assert sum(match is not None for match in shown) >= 2, screen
    assert all(m is None or m.start() == 0 for m in shown)
    assert not any(LOG_LINE.match(line) and PROGRESS.search(line) for line in screen.splitlines())
    assert "done: 9.0 MiB in " in screen


def test_fetch_help_names_the_endpoint_and_the_token_variables() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "fetch", "--help"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "--endpoint URL" in result.stdout
    assert "$HF_ENDPOINT" in result.stdout and "$HF_TOKEN" in result.stdout
    assert "130" in result.stdout


@pytest.mark.parametrize(
    "endpoint", ["ftp://hub.example", "https://user:pw@hub.example", "https://hub.example/?x=1"]
)
def test_a_bad_endpoint_is_refused_before_any_request(
    hub: Hub, tmp_path: Path, endpoint: str
) -> None:
    lock, dest = write_lock(tmp_path, hub), tmp_path / "models"
    argv = [*fetch_argv(hub, lock, dest)[:-2], "--endpoint", endpoint]
    result = subprocess.run(argv, cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    assert result.returncode == 2
    assert "error: --endpoint " in result.stdout and "is not a hub URL" in result.stdout
    assert hub.requests == [] and not dest.exists()
