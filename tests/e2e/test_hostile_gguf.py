"""A hostile GGUF header through every door that reads one (`plan --gguf`, `hub stub`, `lock`,
`init`): each door reads every case in a process of its own under a 512 MiB address-space limit,
and each case exits 2 naming the file, the key or tensor and the byte offset, with no traceback
and nothing left behind."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.hub_client import MAX_API_ANSWER
from tests.conftest import ROOT
from tests.support import hostile_http as peers
from tests.support.hostile_gguf import HOSTILE_HEADERS, VALUE_HEADERS, full
from tests.support.hub_emulator import Hub, running_hub
from tests.support.lock_hub import stack_file
from tests.support.project import new_project, project_env

ADDRESS_SPACE = 512 * 2**20
REPO = "acme/Hostile-GGUF"
CASES = sorted(HOSTILE_HEADERS)
# A header copy refuses what the reader refuses and a layer count it cannot hold; the values
# only a summary judges (VALUE_HEADERS, a negative layer count) are copied as they are.
STUB_CASES = sorted(set(CASES) - set(VALUE_HEADERS) - {"block-count-negative"})


def limited(cwd: Path, *args: str, endpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """`llm-infra ARGS` as its own process under the address-space limit."""
    return subprocess.run(
        ["prlimit", f"--as={ADDRESS_SPACE}", "--", sys.executable, "-m", "infra.cli", *args],
        cwd=cwd, env=project_env(endpoint), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def batch(runs: list[dict[str, Any]], endpoint: str | None = None) -> list[Result]:
    """Each run (`argv`, `cwd`) of one door in one process under the address-space limit."""
    done = subprocess.run(
        ["prlimit", f"--as={ADDRESS_SPACE}", "--", sys.executable, "-m", "tests.support.cli_batch"],
        input=json.dumps(runs), cwd=ROOT, env=project_env(endpoint), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [Result(*result) for result in json.loads(done.stdout)]


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def assert_refused(result: Result | subprocess.CompletedProcess[str], case: str, file: str) -> None:
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "Traceback" not in said and "MemoryError" not in said, said
    key = HOSTILE_HEADERS[case][1]
    assert file in said, f"the file is not named: {said}"
    assert key in said, f"{key!r} is not named: {said}"
    assert "byte" in said, f"no offset: {said}"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    for case, (data, _) in HOSTILE_HEADERS.items():
        (folder / f"{case}.gguf").write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    repos = {
        f"{REPO}-{i}": {"M.gguf": data} for i, (data, _) in enumerate(HOSTILE_HEADERS.values())
    }
    with running_hub(Hub(repos=repos)) as served:
        yield served


def repo_of(case: str) -> str:
    return f"{REPO}-{list(HOSTILE_HEADERS).index(case)}"


@pytest.fixture(scope="module")
def plan_results(files: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    work = tmp_path_factory.mktemp("plan")
    stack = stack_file(work)
    runs = [{"argv": ["plan", str(stack), "--gguf", str(files / f"{case}.gguf")], "cwd": str(work)}
            for case in CASES]  # fmt: skip
    return dict(zip(CASES, batch(runs), strict=True))


@pytest.fixture(scope="module")
def stub_results(
    files: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Result, Path]]:
    out = tmp_path_factory.mktemp("stub")
    runs = [{"argv": ["hub", "stub", str(files / f"{case}.gguf"), "--out", str(out / case)],
             "cwd": str(out)} for case in STUB_CASES]  # fmt: skip
    for case in STUB_CASES:
        (out / case).mkdir()
    results = batch(runs)
    return {case: (results[i], out / case) for i, case in enumerate(STUB_CASES)}


@pytest.fixture(scope="module")
def lock_results(
    hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Result, Path]]:
    work = tmp_path_factory.mktemp("lock")
    runs = []
    for case in CASES:
        (work / case).mkdir()
        stack = stack_file(work / case, repo=repo_of(case), files="M.gguf")
        runs.append({"argv": ["lock", str(stack)], "cwd": str(work / case)})
    results = batch(runs, hub.url)
    return {case: (results[i], work / case) for i, case in enumerate(CASES)}


@pytest.fixture(scope="module")
def init_results(
    hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Result, Path]]:
    work = tmp_path_factory.mktemp("init")
    runs = [{"argv": ["init", "hostile", "--box", "strix-halo", "--repo", repo_of(case),
                      "--file", "M.gguf"],
             "cwd": str(new_project(work / case))} for case in CASES]  # fmt: skip
    results = batch(runs, hub.url)
    return {case: (results[i], work / case) for i, case in enumerate(CASES)}


@pytest.mark.parametrize("case", CASES)
def test_plan_gguf_refuses_the_header(case: str, plan_results: dict[str, Result]) -> None:
    assert_refused(plan_results[case], case, f"{case}.gguf")


@pytest.mark.parametrize("case", STUB_CASES)
def test_hub_stub_refuses_the_header_and_leaves_nothing(
    case: str, stub_results: dict[str, tuple[Result, Path]]
) -> None:
    result, out = stub_results[case]
    assert_refused(result, case, f"{case}.gguf")
    assert list(out.iterdir()) == []


@pytest.fixture(scope="module")
def remote_stub_results(
    hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Result, Path]]:
    out = tmp_path_factory.mktemp("remote-stub")
    runs = []
    for case in STUB_CASES:
        (out / case).mkdir()
        url = f"{hub.url}/{repo_of(case)}/resolve/main/M.gguf"
        runs.append({"argv": ["hub", "stub", url, "--out", str(out / case)], "cwd": str(out)})
    results = batch(runs, hub.url)
    return {case: (results[i], out / case) for i, case in enumerate(STUB_CASES)}


@pytest.mark.parametrize("case", STUB_CASES)
def test_hub_stub_of_a_url_refuses_the_header_and_leaves_nothing(
    case: str, remote_stub_results: dict[str, tuple[Result, Path]]
) -> None:
    # Over HTTP Range reads the file's size comes from the first answer's Content-Range.
    result, out = remote_stub_results[case]
    assert_refused(result, case, "M.gguf")
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("case", CASES)
def test_lock_refuses_the_header(case: str, lock_results: dict[str, tuple[Result, Path]]) -> None:
    result, work = lock_results[case]
    assert_refused(result, case, "M.gguf")
    assert not (work / "tiny.lock.json").exists()


@pytest.mark.parametrize("case", CASES)
def test_init_refuses_the_header(case: str, init_results: dict[str, tuple[Result, Path]]) -> None:
    result, project = init_results[case]
    assert_refused(result, case, "M.gguf")
    assert not list(project.glob("stacks/*"))


def test_hub_stub_never_writes_outside_out(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    # The URL's last segment decodes to a path that climbs out of --out.
    url = "http://127.0.0.1:9/repo/resolve/main/x%2F..%2F..%2Fescaped.gguf"
    result = limited(tmp_path, "hub", "stub", url, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "not a .gguf file name" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.rglob("escaped.gguf")) and list(out.iterdir()) == []


def test_hub_stub_leaves_no_temporary_file_when_the_write_fails(tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    with source.open("wb") as handle:
        handle.write(full())
        handle.truncate(1 << 20)
    out = tmp_path / "out"
    out.mkdir()
    # The copy is as large as its source (1 MiB): past a 64 KiB file-size limit its extension
    # fails with "File too large", as on a filesystem or quota that small.
    result = subprocess.run(
        ["prlimit", "--fsize=65536", "--", sys.executable, "-m", "infra.cli", "hub", "stub",
         str(source), "--out", str(out)],
        cwd=tmp_path, env=project_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "File too large" in result.stderr and "Traceback" not in result.stderr
    assert list(out.iterdir()) == []


def gzip_bomb(inflated: int = 1 << 30) -> bytes:
    """A gzip stream of `inflated` bytes of JSON whitespace then `{}` (~4.5 MiB compressed:
    the fastest level, a third of the best one's time, is bomb enough)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    parts = [packer.compress(block) for _ in range(inflated >> 20)]
    return b"".join(parts) + packer.compress(b"{}") + packer.flush()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb()


@pytest.mark.parametrize("command", ["lock", "init"])
def test_a_compressed_hub_answer_is_refused_not_inflated(
    command: str, bomb: bytes, tmp_path: Path
) -> None:
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    with peers.serve(peers.answer(200, bomb, headers)) as hub:
        if command == "lock":
            args: tuple[str, ...] = ("lock", str(stack_file(tmp_path, repo="acme/m")))
        else:
            args = ("init", "x", "--box", "strix-halo", "--repo", "acme/m", "--file", "M.gguf")
        result = limited(new_project(tmp_path / "p"), *args, endpoint=hub.url)
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "gzip-encoded" in said and "Traceback" not in said and "MemoryError" not in said
    assert all(seen.headers.get("accept-encoding") == "identity" for seen in hub.seen)


def test_a_hub_answer_past_the_cap_is_refused(tmp_path: Path) -> None:
    endless = b"[" + b" " * (MAX_API_ANSWER + 1024) + b"]"
    with peers.serve(peers.answer(200, endless)) as hub:
        result = limited(tmp_path, "lock", str(stack_file(tmp_path, repo="acme/m")),
                         endpoint=hub.url)  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert f"past {MAX_API_ANSWER} bytes" in said and "Traceback" not in said
