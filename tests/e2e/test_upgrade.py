"""Model upgrades against the hub emulator: the old model stays whole until the new one is verified.

Two shapes of upgrade, as operators meet them: a new quant under new names (the old files are
retired by pattern), and a new revision under the same names (the new files must not replace
the old ones before all of them are verified). Every failure leaves the old model complete for
`check-model`, and a real llama-server b11434 still starts from it
(tests/contract/test_upgrade_serves.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from components.payloads import FETCHER_SOURCE
from components.payloads.fetcher import FetchError, load_lock
from components.payloads.fetcher import fetch as fetch_files
from tests.conftest import ROOT
from tests.support import small_disk
from tests.support.hub_emulator import Hub, running_hub
from tests.support.project import project_env
from tests.support.upgrade import (
    NEW_REPO,
    OLD,
    OLD_REPO,
    RETIRE_OLD,
    SHAPES,
    FailedUpgrade,
    Upgrade,
    assert_old_model_whole,
    check_model,
    fetch,
    prepared,
    retire_args,
    upgrade_hub,
    write_lock,
)

hub = pytest.fixture(upgrade_hub)


def test_a_failed_upgrade_leaves_the_old_model_complete(a_failed_upgrade: FailedUpgrade) -> None:
    upgrade = a_failed_upgrade.upgrade
    assert_old_model_whole(a_failed_upgrade.hub, upgrade)
    if a_failed_upgrade.shape == "same names":
        command = ["check-model", "--lock", str(upgrade.old_lock), "--dest", str(upgrade.dest)]
        cli = subprocess.run(
            [sys.executable, "-m", "infra.cli", *command],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert cli.returncode == 0 and "3 files complete" in cli.stdout, cli.stdout + cli.stderr


def background_fetch(hub: Hub, upgrade: Upgrade, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_ENDPOINT": hub.url}
    command = [
        sys.executable, str(FETCHER_SOURCE), "fetch", "--lock", str(upgrade.new_lock),
        "--dest", str(upgrade.dest), *retire_args(upgrade), *extra,
    ]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def wait_for_bytes(hub: Hub, upgrade: Upgrade, count: int) -> None:
    deadline = time.monotonic() + 30
    sent = 0
    while time.monotonic() < deadline:
        sent = sum(hub.bytes_sent.get(p, 0) for p in upgrade.new_paths)
        if sent >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"only {sent} bytes of the new model sent in 30 s")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_good_upgrade_switches_and_retires_only_after_the_new_set_is_verified(
    hub: Hub, tmp_path: Path, shape: str
) -> None:
    upgrade = prepared(hub, tmp_path, shape)
    total = sum(len(hub.repos[upgrade.new_repo][p]) for p in upgrade.new_paths)
    hub.bytes_sent.clear()
    hub.throttle_bytes_per_s = 200_000
    process = background_fetch(hub, upgrade)
    wait_for_bytes(hub, upgrade, total // 2)
    # Mid-download: the old model is untouched and still passes the server's init check. The
    # transfer slows while the checks run, so a busy machine cannot finish it under them.
    hub.throttle_bytes_per_s = 20_000
    assert_old_model_whole(hub, upgrade)
    hub.throttle_bytes_per_s = 200_000
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    lines = out.splitlines()
    marker = next(i for i, line in enumerate(lines) if "files complete; marker" in line)
    completes = [i for i, line in enumerate(lines) if ": complete (" in line]
    retired = [i for i, line in enumerate(lines) if " retired " in line]
    assert len(completes) == 3 and max(completes) < marker
    for index, path in enumerate(upgrade.new_paths):
        name = upgrade.new_name(index)
        assert (upgrade.dest / name).read_bytes() == hub.repos[upgrade.new_repo][path]
    assert check_model(upgrade.new_lock, upgrade.dest).returncode == 0
    old_check = check_model(upgrade.old_lock, upgrade.dest)
    assert old_check.returncode == 1
    if shape == "new names":
        assert len(retired) == 3 and min(retired) > marker
        assert not any((upgrade.dest / p.rsplit("/", 1)[-1]).exists() for p in OLD)
    else:
        # The old marker went before the first rename: no check passes on a mixed set.
        assert any("removed" in line for line in lines[:marker])
        assert "no completion marker for this lock" in old_check.stdout + old_check.stderr
    assert not list(upgrade.dest.glob(".*.ready")) and not list(upgrade.dest.glob(".*.part"))


def test_an_upgrade_killed_midway_keeps_the_old_model_and_resumes(hub: Hub, tmp_path: Path) -> None:
    upgrade = prepared(hub, tmp_path, "same names")
    total = sum(len(hub.repos[NEW_REPO][p]) for p in OLD)
    hub.bytes_sent.clear()
    hub.throttle_bytes_per_s = 300_000
    process = background_fetch(hub, upgrade, "--parallel", "1")
    wait_for_bytes(hub, upgrade, total // 2)
    process.kill()
    process.communicate()
    assert_old_model_whole(hub, upgrade)
    hub.throttle_bytes_per_s = None
    hub.bytes_sent.clear()
    result = fetch(hub, upgrade.new_lock, upgrade.dest)
    assert result.returncode == 0, result.stdout
    assert sum(hub.bytes_sent.values()) < total
    assert check_model(upgrade.new_lock, upgrade.dest).returncode == 0


def test_replace_deletes_the_old_model_first_only_when_both_do_not_fit(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade = prepared(hub, tmp_path, "new names")
    lock = load_lock(upgrade.new_lock)
    needed = sum(f.get("size") or 0 for f in lock.files)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)

    def used(dest: Path) -> int:
        return sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())

    # A disk one byte short of both models: deleting the old one frees its space.
    capacity = needed - 1 + used(upgrade.dest)
    fetch_files(lock, upgrade.dest, 1, upgrade.retire, upgrade="replace",
                free_space=lambda dest: capacity - used(dest))  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    retired = [i for i, line in enumerate(lines) if " retired " in line]
    completes = [i for i, line in enumerate(lines) if ": complete (" in line]
    assert len(retired) == 3 and max(retired) < min(completes)
    assert "upgrade: replace" in "\n".join(lines[: min(retired)])
    assert check_model(upgrade.new_lock, upgrade.dest).returncode == 0


def test_replace_keeps_the_old_model_while_a_server_still_maps_it_on_a_disk_too_small_for_both(
    tmp_path: Path,
) -> None:
    """A tmpfs that holds one model but not two; the old model's files mapped by a process
    (as llama-server maps a GGUF) in another process tree, as another pod on the node."""
    rng = random.Random(11)
    old = {f"UD-IQ1_M/Old-0000{i}-of-00003.gguf": rng.randbytes(400_000) for i in (1, 2, 3)}
    new = {f"UD-Q2_K/New-0000{i}-of-00003.gguf": rng.randbytes(400_000) for i in (1, 2, 3)}
    with running_hub(Hub(repos={OLD_REPO: {**old, **new}})) as hub:
        old_lock = write_lock(tmp_path / "old.lock.json", hub, OLD_REPO, list(old))
        new_lock = write_lock(tmp_path / "new.lock.json", hub, OLD_REPO, list(new))
        disk = tmp_path / "disk"
        fetcher = [sys.executable, str(FETCHER_SOURCE)]

        def fetch_new() -> dict[str, object]:
            return {"argv": [*fetcher, "fetch", "--lock", str(new_lock), "--dest", str(disk),
                             "--upgrade", "replace", "--retire", "Old-*.gguf"]}  # fmt: skip

        def check(lock: Path) -> dict[str, object]:
            return {"argv": [*fetcher, "check", "--lock", str(lock), "--dest", str(disk)]}

        steps: list[dict[str, object]] = [
            {"argv": [*fetcher, "fetch", "--lock", str(old_lock), "--dest", str(disk)]},
            {"hold": [str(disk / p.rsplit("/", 1)[-1]) for p in old]},
            fetch_new(),
            check(old_lock),
            {"release": True},
            fetch_new(),
            check(new_lock),
        ]
        env = {**os.environ, "HF_ENDPOINT": hub.url}
        done = subprocess.run(
            small_disk.command("2m", disk, steps), capture_output=True, text=True, env=env,
            timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, _, refused, old_check, _, replaced, new_check = json.loads(done.stdout)
    assert first["code"] == 0, first
    # Both models do not fit: the old one is still mapped, so deleting it would free nothing.
    assert refused["code"] == 7, refused
    assert "is still open or mapped by a running process" in str(refused["stdout"])
    assert "nothing was deleted" in str(refused["stdout"])
    assert "Traceback" not in str(refused["stderr"])
    assert old_check["code"] == 0, old_check
    # Once the old server is gone the replace frees real space and the new model fits.
    assert replaced["code"] == 0, replaced
    assert new_check["code"] == 0, new_check


def test_replace_measures_the_disk_after_the_unlink_and_deletes_nothing_more(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The space the unlink should have freed never appears (a lease was granted, but another
    hard link keeps the blocks, say), so nothing more is deleted and the download does not
    start."""
    upgrade = prepared(hub, tmp_path, "new names")
    lock = load_lock(upgrade.new_lock)
    needed = sum(f.get("size") or 0 for f in lock.files)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.requests.clear()
    with pytest.raises(FetchError) as short:
        fetch_files(lock, upgrade.dest, 1, upgrade.retire, upgrade="replace",
                    free_space=lambda _: needed - 1)  # fmt: skip
    assert short.value.exit_code == 7
    assert "nothing more is deleted and the download did not start" in str(short.value)
    assert [r for r in hub.requests if r[0] == "GET"] == []


# Run as another user (nobody) than the old model's owner: the kernel refuses that user a write
# lease on the files (EACCES), as after server.runAsUser changed. The disk is made too small for
# both models by the same free-space stand-in as above; the lease refusal is the kernel's own.
# The fetcher runs as shipped (beside http_policy.py, on a plain Python), from a copy that user can
# read: the checkout may sit under a folder only its owner can enter.
AS_ANOTHER_USER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from fetcher import FetchError, fetch, load_lock
lock_path, dest, retire = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
lock = load_lock(Path(lock_path))
needed = sum(f.get("size") or 0 for f in lock.files)
try:
    fetch(lock, dest, 1, [retire], upgrade="replace", free_space=lambda _: needed - 1)
except FetchError as exc:
    print(exc)
    sys.exit(exc.exit_code)
"""


def test_replace_keeps_an_old_model_no_lease_can_prove_unused(hub: Hub) -> None:
    work = Path(tempfile.mkdtemp(prefix="lease-"))
    try:
        work.chmod(0o755)
        upgrade = prepared(hub, work, "new names")
        # The other user may write and delete everything there: only the lease stops it.
        for path in (upgrade.dest, *upgrade.dest.rglob("*")):
            path.chmod(0o777 if path.is_dir() else 0o666)
        payload = work / "payload"
        payload.mkdir(mode=0o755)
        for name in ("fetcher.py", "http_policy.py"):
            shutil.copy(ROOT / "components" / "payloads" / name, payload / name)
            (payload / name).chmod(0o644)
        upgrade.new_lock.chmod(0o644)
        hub.requests.clear()
        # The base interpreter, not the venv's (inside the checkout).
        python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-I",
             "-c", AS_ANOTHER_USER, str(upgrade.new_lock), str(upgrade.dest), RETIRE_OLD,
             str(payload)],
            cwd=work, env={**project_env(hub.url), "HOME": str(work)}, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 7, result.stdout + result.stderr
        assert "no write lease could be taken" in result.stdout
        assert "belongs to another user" in result.stdout and "nothing was deleted" in result.stdout
        assert_old_model_whole(hub, upgrade)
        assert [r for r in hub.requests if r[0] == "GET"] == []
    finally:
        shutil.rmtree(work)
