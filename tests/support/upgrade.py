"""Model upgrades against the hub emulator: the repos, locks and the faults that stop an upgrade.

A pytest plugin of the test suite (tests/conftest.py): `a_failed_upgrade` is every shape of
upgrade stopped by every fault, for the tiers that each check what such an upgrade leaves.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.payloads.fetcher import FetchError, fetch_document, load_lock
from components.payloads.fetcher import fetch as fetch_files
from tests.support.cli import run_cli
from tests.support.hub_emulator import Hub, run_fetcher, running_hub
from tests.support.tiny_gguf import write_tiny_model_seeded

OLD_REPO = "unsloth/Tiny-GGUF"
NEW_REPO = "unsloth/Tiny-GGUF-0801"
OLD = [f"UD-IQ1_M/Tiny-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
NEW_NAMES = [f"UD-Q2_K/Tiny-UD-Q2_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
RETIRE_OLD = "Tiny-UD-IQ1_M-*.gguf"
SHAPES = ["new names", "same names"]
FAULTS = ["404", "401", "corrupt", "disk full"]


def shards(directory: Path, prefix: str, seed: int) -> list[bytes]:
    return [p.read_bytes() for p in write_tiny_model_seeded(directory, prefix, 3, seed=seed)]


def upgrade_hub(tmp_path_factory: pytest.TempPathFactory) -> Generator[Hub, None, None]:
    """The hub emulator with the old model, a new quant and a new revision of the old names, as
    a module's fixture: `hub = pytest.fixture(upgrade_hub)`."""
    work = tmp_path_factory.mktemp("models")
    old = shards(work / "old", "Tiny-UD-IQ1_M", seed=1)
    q2k = shards(work / "q2k", "Tiny-UD-Q2_K", seed=2)
    # The same names, other weights: as a new upstream revision of the same quant.
    respun = shards(work / "respun", "Tiny-UD-IQ1_M", seed=3)
    repos = {
        OLD_REPO: {**dict(zip(OLD, old, strict=True)), **dict(zip(NEW_NAMES, q2k, strict=True))},
        NEW_REPO: dict(zip(OLD, respun, strict=True)),
    }
    with running_hub(Hub(repos=repos)) as served:
        yield served


@dataclass
class Upgrade:
    """An old model in place, and the lock (and retire patterns) of the next one."""

    dest: Path
    old_lock: Path
    new_lock: Path
    new_repo: str
    new_paths: list[str]
    retire: list[str]

    def new_name(self, index: int) -> str:
        return self.new_paths[index].rsplit("/", 1)[-1]


def write_lock(path: Path, hub: Hub, repo: str, paths: list[str]) -> Path:
    files = [
        {
            "path": p,
            "name": p.rsplit("/", 1)[-1],
            "size": len(hub.repos[repo][p]),
            "sha256": hub.sha256(repo, p),
        }
        for p in paths
    ]
    path.write_text(json.dumps(fetch_document(repo, "main", files)))  # type: ignore[arg-type]
    return path


def fetch(hub: Hub, lock: Path, dest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_fetcher(hub, "fetch", "--lock", str(lock), "--dest", str(dest), *extra)


def check_model(lock: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    """The server's init check, `llm-infra check-model` in this process: the fetcher's own
    `check` (what the pod runs as `fetcher.py check`), which reads only the lock and the files."""
    return run_cli(["check-model", "--lock", str(lock), "--dest", str(dest)])


def prepared(hub: Hub, tmp_path: Path, shape: str) -> Upgrade:
    dest = tmp_path / "models"
    old_lock = write_lock(tmp_path / "old.lock.json", hub, OLD_REPO, OLD)
    assert fetch(hub, old_lock, dest).returncode == 0
    if shape == "new names":
        new_lock = write_lock(tmp_path / "new.lock.json", hub, OLD_REPO, NEW_NAMES)
        return Upgrade(dest, old_lock, new_lock, OLD_REPO, NEW_NAMES, [RETIRE_OLD])
    new_lock = write_lock(tmp_path / "new.lock.json", hub, NEW_REPO, OLD)
    return Upgrade(dest, old_lock, new_lock, NEW_REPO, OLD, [])


def retire_args(upgrade: Upgrade) -> list[str]:
    return [arg for pattern in upgrade.retire for arg in ("--retire", pattern)]


def assert_old_model_whole(hub: Hub, upgrade: Upgrade) -> None:
    for path in OLD:
        assert (upgrade.dest / path.rsplit("/", 1)[-1]).read_bytes() == hub.repos[OLD_REPO][path]
    result = check_model(upgrade.old_lock, upgrade.dest)
    assert result.returncode == 0, result.stdout + result.stderr
    assert check_model(upgrade.new_lock, upgrade.dest).returncode == 1


def failed_upgrade(
    hub: Hub, tmp_path: Path, shape: str, fault: str, monkeypatch: pytest.MonkeyPatch
) -> Upgrade:
    """The old model in place, then an upgrade that the fault stops."""
    upgrade = prepared(hub, tmp_path, shape)
    last = upgrade.new_paths[-1]
    if fault == "disk full":
        lock = load_lock(upgrade.new_lock)
        needed = sum(f.get("size") or 0 for f in lock.files)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        # Room for the new model only if the old one went first: it must not.
        with pytest.raises(FetchError) as caught:
            fetch_files(lock, upgrade.dest, 1, upgrade.retire, free_space=lambda _: needed - 1)
        assert caught.value.exit_code == 7
        assert "kept until the new model is verified" in str(caught.value)
        return upgrade
    if fault == "404":
        hub.status_once[last] = [404]
    elif fault == "401":
        hub.token = "hf_only_for_the_new_repo"
    else:
        hub.corrupt_always.add(last)
    result = fetch(hub, upgrade.new_lock, upgrade.dest, "--parallel", "1", *retire_args(upgrade))
    assert result.returncode == {"404": 5, "401": 4, "corrupt": 6}[fault], result.stdout
    assert "retired" not in result.stdout
    if fault in ("404", "corrupt"):
        # What was verified waits under a hidden name; nothing took a final name.
        assert (upgrade.dest / f".{upgrade.new_name(0)}.ready").is_file()
    return upgrade


@dataclass
class FailedUpgrade:
    """An upgrade a fault stopped, on a hub of its own: the old model is in `upgrade.dest`."""

    hub: Hub
    upgrade: Upgrade
    shape: str
    fault: str


@pytest.fixture(params=[(shape, fault) for shape in SHAPES for fault in FAULTS], ids="-".join)
def a_failed_upgrade(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[FailedUpgrade]:
    """Each shape of upgrade (new names, same names) stopped by each fault."""
    shape, fault = request.param
    with contextlib.closing(upgrade_hub(tmp_path_factory)) as hubs:
        hub = next(hubs)
        yield FailedUpgrade(
            hub, failed_upgrade(hub, tmp_path, shape, fault, monkeypatch), shape, fault
        )
