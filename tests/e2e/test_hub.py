"""The stand-in hub (`llm-infra hub`): huggingface_hub's own client against a served directory,
header-only GGUF files that read back as their originals, and the command line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from components.gguf_header import read_gguf_header, summarize
from infra.hub.gguf_stub import (
    SAMPLE_FILE,
    SAMPLE_REPO,
    Qwen3MoeShape,
    declared_size,
    write_sample,
)
from infra.hub.repos import DirectoryRepos, FileChanged, file_digests
from infra.hub.server import HubServer, serving
from tests.support.hub_emulator import Hub, running_hub
from tests.support.project import project_env
from tests.support.tiny_gguf import write_tiny_split_model

REPO = "acme/Tiny-GGUF"


@pytest.fixture
def served_dir(tmp_path: Path) -> Path:
    """A hub directory: a tiny split model, a config file, and entries that are not served."""
    root = tmp_path / "hub"
    write_tiny_split_model(root / REPO / "Q8_0", "Tiny-Q8_0", shards=2)
    (root / REPO / "config.json").write_text('{"model_type": "llama"}')
    (root / REPO / ".cache").mkdir()
    (root / REPO / ".cache" / "secret").write_text("not served")
    (root / REPO / "has space.txt").write_text("not a lockable name")
    (root / "lonely-file.txt").write_text("not OWNER/NAME")
    return root


def test_huggingface_hub_lists_and_downloads_a_served_directory(
    served_dir: Path, tmp_path: Path
) -> None:
    # Imported here: huggingface_hub (with httpx) costs each pytest worker a quarter second.
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.hf_api import RepoFile

    source = DirectoryRepos(served_dir)
    assert sorted(source.skipped) == [
        "has space.txt: not a plain file with a lockable name",
        "lonely-file.txt: not an owner folder (OWNER/NAME/files)",
    ]
    with serving(HubServer(source)) as server:
        api = HfApi(endpoint=server.url, token=False)
        info = api.model_info(REPO, revision="main")
        assert info.sha == source.repos[REPO].commit
        tree = {
            entry.path: entry
            for entry in api.list_repo_tree(REPO, revision=info.sha, recursive=True)
            if isinstance(entry, RepoFile)
        }
        assert sorted(tree) == [
            "Q8_0/Tiny-Q8_0-00001-of-00002.gguf",
            "Q8_0/Tiny-Q8_0-00002-of-00002.gguf",
            "config.json",
        ]
        for path, entry in tree.items():
            data = (served_dir / REPO / path).read_bytes()
            assert entry.size == len(data)
            if path.endswith(".gguf"):
                assert (
                    entry.lfs is not None and entry.lfs.sha256 == hashlib.sha256(data).hexdigest()
                )
            else:
                # A plain git file: its oid is git's own blob id.
                blob = hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()
                assert entry.lfs is None and entry.blob_id == blob
        downloaded = hf_hub_download(
            REPO, "Q8_0/Tiny-Q8_0-00002-of-00002.gguf", endpoint=server.url,
            cache_dir=tmp_path / "hf-cache", token=False,
        )  # fmt: skip
        assert (
            Path(downloaded).read_bytes()
            == (served_dir / REPO / "Q8_0/Tiny-Q8_0-00002-of-00002.gguf").read_bytes()
        )
        # Only the top folder without recursive=true, as the hub lists it.
        top = [entry.path for entry in api.list_repo_tree(REPO, revision="main")]
        assert top == ["Q8_0", "config.json"]


def test_a_changed_file_is_a_new_commit(served_dir: Path) -> None:
    before = DirectoryRepos(served_dir).repos[REPO].commit
    (served_dir / REPO / "config.json").write_text('{"model_type": "qwen3"}')
    assert DirectoryRepos(served_dir).repos[REPO].commit != before


def test_ranges_as_the_hub_answers_them() -> None:
    data = bytes(range(256)) * 8
    with running_hub(Hub(repos={REPO: {"model.gguf": data}})) as hub:
        url = f"{hub.url}/{REPO}/resolve/main/model.gguf"

        def get(range_header: str) -> tuple[int, bytes, str | None]:
            request = urllib.request.Request(url, headers={"Range": range_header})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return answer.status, answer.read(), answer.headers["Content-Range"]
            except urllib.error.HTTPError as exc:
                return exc.code, b"", exc.headers["Content-Range"]

        assert get("bytes=10-19") == (206, data[10:20], f"bytes 10-19/{len(data)}")
        assert get("bytes=2000-") == (206, data[2000:], f"bytes 2000-{len(data) - 1}/{len(data)}")
        assert get("bytes=-48") == (206, data[-48:], f"bytes 2000-{len(data) - 1}/{len(data)}")
        assert get(f"bytes={len(data)}-") == (416, b"", f"bytes */{len(data)}")


def test_a_header_only_file_hashes_as_the_zeros_its_hole_reads_as(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "stub.gguf"
    with path.open("wb") as handle:
        handle.write(b"GGUF header bytes " * 1000)
        handle.truncate(48 * 1024 * 1024 + 17)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert file_digests(path, path.stat().st_size, with_blob=False) == (expected, None)
    # Kept by the bytes before the hole and the size: the same file elsewhere is not rehashed.
    cached = json.loads((tmp_path / "cache" / "llm-infra" / "hub-sha256.json").read_text())
    assert list(cached.values()) == [expected]
    copy = tmp_path / "elsewhere.gguf"
    with copy.open("wb") as handle:
        handle.write(b"GGUF header bytes " * 1000)
        handle.truncate(48 * 1024 * 1024 + 17)
    assert file_digests(copy, copy.stat().st_size, with_blob=False) == (expected, None)
    # Another size is another file.
    with copy.open("r+b") as handle:
        handle.truncate(48 * 1024 * 1024)
    assert file_digests(copy, copy.stat().st_size, with_blob=False)[0] == (
        hashlib.sha256(copy.read_bytes()).hexdigest()
    )


def test_the_sample_is_a_real_shaped_qwen3moe_header_at_its_full_size(tmp_path: Path) -> None:
    path = write_sample(tmp_path)
    assert path == tmp_path / SAMPLE_REPO / SAMPLE_FILE
    with path.open("rb") as handle:
        header = read_gguf_header(handle)
    shape = Qwen3MoeShape()
    summary = summarize([header])
    metadata = summary["metadata"]
    assert summary["architecture"] == "qwen3moe" and len(summary["layer_bytes"]) == shape.n_layer
    assert metadata["qwen3moe.attention.head_count_kv"] == 4  # grouped-query attention
    assert metadata["qwen3moe.expert_count"] == 128 and summary["vocab_size"] == 151936
    assert path.stat().st_size == declared_size(header)
    assert 17 * 2**30 < summary["total_bytes"] < 18 * 2**30
    # A hole: the data region takes no disk.
    assert path.stat().st_blocks * 512 < 16 * 2**20


def test_stub_copies_a_header_byte_for_byte_from_a_file_and_from_a_url(tmp_path: Path) -> None:
    shards = write_tiny_split_model(tmp_path / "src", "Tiny", shards=2)
    files = {f"Q8_0/{p.name}": p.read_bytes() for p in shards}
    with running_hub(Hub(repos={REPO: files})) as hub:
        url = f"{hub.url}/{REPO}/resolve/main/Q8_0/{shards[1].name}"
        result = subprocess.run(
            [sys.executable, "-m", "infra.cli", "hub", "stub", str(shards[0]), url,
             "--out", str(tmp_path / "out")],
            capture_output=True, text=True, env=project_env(), timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        # Only the header went over the wire.
        assert hub.bytes_sent[f"Q8_0/{shards[1].name}"] < len(files[f"Q8_0/{shards[1].name}"])
    for shard in shards:
        copy = tmp_path / "out" / shard.name
        original = shard.read_bytes()
        with shard.open("rb") as handle:
            header = read_gguf_header(handle)
        assert copy.stat().st_size == len(original)
        assert copy.read_bytes()[: header.data_offset] == original[: header.data_offset]
        with copy.open("rb") as handle:
            assert summarize([read_gguf_header(handle)]) == summarize([header])


def test_serve_detach_points_the_shell_at_the_hub_and_the_pid_stops_it(
    served_dir: Path,
) -> None:
    script = (
        f'eval "$({sys.executable} -m infra.cli hub serve {served_dir} --detach)" && '
        'echo "$HF_ENDPOINT $LLM_INFRA_HUB_PID"'
    )
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=project_env(), timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"(http://127\.0\.0\.1:\d+) (\d+)\n", result.stdout)
    assert match, result.stdout
    url, pid = match[1], int(match[2])
    try:
        with urllib.request.urlopen(f"{url}/api/models/{REPO}/revision/main", timeout=10) as info:
            assert json.load(info)["id"] == REPO
        assert f"stop it with: kill {pid}" in result.stderr
    finally:
        os.kill(pid, signal.SIGTERM)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "{tmp}/missing"], "missing: not a directory"),
        (["serve", "{tmp}"], "no repos (serve DIR holding DIR/OWNER/NAME/files)"),
        (["serve", "{tmp}", "--port", "70000"], "--port: 70000 is not a port"),
        (["stub", "{tmp}/notes.txt", "--out", "{tmp}/out"], "notes.txt: not a .gguf file name"),
        (["stub", "{tmp}/fake.gguf", "--out", "{tmp}/out"], "not a GGUF file this reader"),
    ],
)
def test_hub_refuses_bad_input_with_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "fake.gguf").write_bytes(b"not a gguf at all")
    (tmp_path / "notes.txt").write_text("notes")
    argv = [arg.format(tmp=tmp_path) for arg in args]
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "hub", *argv], capture_output=True, text=True,
        env=project_env(), timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("swap", ["link", "other-file"])
def test_hub_serve_never_serves_a_file_swapped_in_after_the_start(
    tmp_path: Path, swap: str
) -> None:
    root = tmp_path / "hub"
    served = root / "acme" / "m" / "model.gguf"
    served.parent.mkdir(parents=True)
    served.write_bytes(b"GGUF" + bytes(4092))
    secret = tmp_path / "secret.gguf"
    secret.write_bytes(b"SECRET" + bytes(4090))
    repos = DirectoryRepos(root)
    mtime = served.stat().st_mtime_ns
    served.unlink()
    if swap == "link":
        served.symlink_to(secret)
    else:
        shutil.copyfile(secret, served)
    # Same size and modification time as the file the hub described.
    os.utime(secret, ns=(mtime, mtime))
    os.utime(served, ns=(mtime, mtime), follow_symlinks=False)
    repo = repos.repo("acme/m")
    assert repo is not None
    with pytest.raises(FileChanged, match="changed since the hub started"):
        b"".join(repo.files["model.gguf"].read(0, 4096))
