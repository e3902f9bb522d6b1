"""The repos the stand-in hub serves: in memory or in a directory, with git and LFS ids."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any, BinaryIO, Protocol

from infra.user_cache import cache_home

CHUNK = 1024 * 1024
LFS_SUFFIXES = (
    ".gguf", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".msgpack",
    ".model", ".npy", ".npz", ".pkl", ".tflite", ".ot", ".arrow", ".parquet", ".zip", ".gz",
    ".tar", ".xz", ".zst", ".7z",
)  # fmt: skip
"""Files the hub's default `.gitattributes` keeps in LFS (by name); anything over
`LFS_MIN_SIZE` goes there too."""
LFS_MIN_SIZE = 10 * 1024 * 1024
"""The hub refuses plain git files above 10 MB: larger ones are LFS files."""
REPO_PART = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,95}$")
"""An owner or repo name, as `model.repo` accepts it."""
FILE_PART = re.compile(r"^[A-Za-z0-9_+=@-][A-Za-z0-9._+=@-]{0,254}$")
"""A folder or file name inside a repo that a lock accepts: no glob characters, no leading dot."""
STATE_FILE = ".llm-infra-hub.json"
"""Where `DirectoryRepos` keeps the sha256 of each file it hashed, by path, size and mtime."""


def git_blob_oid(data: bytes) -> str:
    """The git blob id of a file's content (what the hub's tree calls `oid`)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The LFS pointer git stores for an LFS file (its `oid` is the pointer's blob id)."""
    spec = "https://git-lfs.github.com/spec/v1"
    return f"version {spec}\noid sha256:{sha256}\nsize {size}\n".encode()


def is_lfs(path: str, size: int) -> bool:
    """Whether the hub keeps this file in LFS: by its name, or because it is large."""
    return path.lower().endswith(LFS_SUFFIXES) or size > LFS_MIN_SIZE


@dataclass(frozen=True)
class HubFile:
    """One file of a repo as the hub describes and serves it."""

    size: int
    sha256: str
    git_oid: str
    """The git blob id: of the content for a git file, of the LFS pointer for an LFS file."""
    lfs: bool
    read: Callable[[int, int], Iterator[bytes]]
    """The bytes from start to end (exclusive), in chunks."""

    @property
    def etag(self) -> str:
        """What the hub sends as `X-Linked-Etag`: the sha256 of an LFS file, else its blob id."""
        return self.sha256 if self.lfs else self.git_oid


@dataclass(frozen=True)
class Repo:
    """A repo at its one commit."""

    commit: str
    files: Mapping[str, HubFile]


def commit_id(files: Mapping[str, HubFile]) -> str:
    """A repo's commit id from its files: another path, size or content is another commit."""
    digest = hashlib.sha1(usedforsecurity=False)
    for path in sorted(files):
        digest.update(f"{path}\0{files[path].size}\0{files[path].sha256}\n".encode())
    return digest.hexdigest()


def _bytes_reader(data: bytes) -> Callable[[int, int], Iterator[bytes]]:
    view = memoryview(data)

    def read(start: int, end: int) -> Iterator[bytes]:
        for offset in range(start, end, CHUNK):
            yield bytes(view[offset : min(offset + CHUNK, end)])

    return read


def memory_file(path: str, data: bytes, lfs: bool | None = None) -> HubFile:
    """A HubFile over bytes (LFS by the hub's rule unless `lfs` says)."""
    sha256 = hashlib.sha256(data).hexdigest()
    in_lfs = is_lfs(path, len(data)) if lfs is None else lfs
    oid = git_blob_oid(lfs_pointer(sha256, len(data)) if in_lfs else data)
    return HubFile(len(data), sha256, oid, in_lfs, _bytes_reader(data))


class MemoryRepos:
    """Repos held in memory as `{repo: {path: bytes}}`, read live (a test may change them
    while the hub runs), all at one fixed commit id."""

    def __init__(
        self,
        repos: dict[str, dict[str, bytes]],
        commit: str,
        is_lfs_file: Callable[[str, int], bool] = is_lfs,
    ) -> None:
        self.repos = repos
        self.commit = commit
        self.is_lfs_file = is_lfs_file
        self._described: dict[tuple[str, str], tuple[bytes, HubFile]] = {}
        self._lock = threading.Lock()

    def _describe(self, repo: str, path: str, data: bytes) -> HubFile:
        with self._lock:
            known = self._described.get((repo, path))
            if known is not None and known[0] is data:
                return known[1]
        described = memory_file(path, data, self.is_lfs_file(path, len(data)))
        with self._lock:
            self._described[(repo, path)] = (data, described)
        return described

    def repo(self, name: str) -> Repo | None:
        """The repo, or None when there is none of that name."""
        files = self.repos.get(name)
        if files is None:
            return None
        return Repo(self.commit, {p: self._describe(name, p, d) for p, d in list(files.items())})


class FileChanged(OSError):
    """A served file changed after the hub described it (restart the hub to serve it)."""


class DirectoryRepos:
    """Repos in a directory, `ROOT/OWNER/NAME/path/to/file`, described once when created.

    Only regular files whose every name a lock accepts are served (no links, nothing hidden,
    no glob characters). Each file's sha256 is computed once and kept in `ROOT/.llm-infra-hub.json`
    by path, size and modification time, so a restart hashes only what changed.
    """

    def __init__(self, root: Path, progress: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.progress = progress or (lambda _: None)
        self.skipped: list[str] = []
        """Entries not served, each with why (for the start-up message)."""
        known = self._read_state()
        state: dict[str, dict[str, Any]] = {}
        repos: dict[str, Repo] = {}
        for name, folder in self._repo_folders():
            files: dict[str, HubFile] = {}
            for path, file in self._files(folder):
                stat = file.lstat()
                key = f"{name}/{path}"
                entry = known.get(key)
                if not (
                    isinstance(entry, dict)
                    and entry.get("size") == stat.st_size
                    and entry.get("mtime_ns") == stat.st_mtime_ns
                    and isinstance(entry.get("sha256"), str)
                    and isinstance(entry.get("git_oid"), str)
                ):
                    entry = self._hash(key, file, stat.st_size)
                    entry["mtime_ns"] = stat.st_mtime_ns
                state[key] = entry
                files[path] = HubFile(
                    stat.st_size,
                    entry["sha256"],
                    entry["git_oid"],
                    bool(entry["lfs"]),
                    self._reader(file, stat),
                )
            if files:
                repos[name] = Repo(commit_id(files), files)
        self.repos = repos
        if state != known:
            self._write_state(state)

    def repo(self, name: str) -> Repo | None:
        """The repo, or None when there is none of that name."""
        return self.repos.get(name)

    def _repo_folders(self) -> Iterator[tuple[str, Path]]:
        for owner in sorted(self.root.iterdir()):
            if owner.name.startswith("."):
                continue
            if owner.is_symlink() or not owner.is_dir() or not REPO_PART.match(owner.name):
                self.skipped.append(f"{owner.name}: not an owner folder (OWNER/NAME/files)")
                continue
            for repo in sorted(owner.iterdir()):
                if repo.name.startswith("."):
                    continue
                if repo.is_symlink() or not repo.is_dir() or not REPO_PART.match(repo.name):
                    self.skipped.append(f"{owner.name}/{repo.name}: not a repo folder")
                    continue
                yield f"{owner.name}/{repo.name}", repo

    def _files(self, folder: Path) -> Iterator[tuple[str, Path]]:
        for directory, subfolders, names in os.walk(folder):
            here = Path(directory)
            for sub in list(subfolders):
                if sub.startswith(".") or not FILE_PART.match(sub) or (here / sub).is_symlink():
                    subfolders.remove(sub)
            subfolders.sort()
            for name in sorted(names):
                file = here / name
                relative = file.relative_to(folder).as_posix()
                if name.startswith("."):
                    continue
                if not FILE_PART.match(name) or file.is_symlink() or not file.is_file():
                    self.skipped.append(f"{relative}: not a plain file with a lockable name")
                    continue
                yield relative, file

    def _hash(self, key: str, file: Path, size: int) -> dict[str, Any]:
        lfs = is_lfs(key, size)

        def told(what: str) -> None:
            self.progress(f"{key}: {what}")

        digest, blob = file_digests(file, size, with_blob=not lfs, progress=told)
        oid = blob if blob is not None else git_blob_oid(lfs_pointer(digest, size))
        return {"size": size, "sha256": digest, "git_oid": oid, "lfs": lfs}

    def _reader(self, file: Path, scanned: os.stat_result) -> Callable[[int, int], Iterator[bytes]]:
        """Reads of the very file the hub scanned: opened without following a link, and the
        file opened must be the same one (device, inode, size, modification time), so a link or
        another file swapped in after the start is refused, never served (the change time tells a
        new file that took the old one's inode, size and modification time)."""
        known = (scanned.st_dev, scanned.st_ino, scanned.st_size, scanned.st_mtime_ns,
                 scanned.st_ctime_ns)  # fmt: skip

        def read(start: int, end: int) -> Iterator[bytes]:
            try:
                fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise FileChanged(
                    f"{file} changed since the hub started ({exc.strerror})"
                ) from None
            with os.fdopen(fd, "rb") as handle:
                stat = os.fstat(handle.fileno())
                opened = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns,
                          stat.st_ctime_ns)  # fmt: skip
                if not S_ISREG(stat.st_mode) or opened != known:
                    raise FileChanged(f"{file} changed since the hub started: restart it")
                handle.seek(start)
                left = end - start
                while left > 0:
                    block = handle.read(min(CHUNK, left))
                    if not block:
                        raise FileChanged(f"{file} ended early: restart the hub")
                    left -= len(block)
                    yield block

        return read

    def _read_state(self) -> dict[str, Any]:
        try:
            state = json.loads((self.root / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _write_state(self, state: dict[str, Any]) -> None:
        target = self.root / STATE_FILE
        try:
            temporary = target.with_name(target.name + ".tmp")
            temporary.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
            temporary.replace(target)
        except OSError as exc:
            # A read-only directory is served all the same; it is hashed again next time.
            self.progress(f"cannot keep the hashes in {target}: {exc}")


def data_end(handle: BinaryIO, size: int) -> int:
    """Where a file's last data ends: after it the file is a hole (reads return zeros without
    touching the disk). The file's size where holes are not reported."""
    end, position = 0, 0
    try:
        while position < size:
            start = os.lseek(handle.fileno(), position, os.SEEK_DATA)
            position = end = os.lseek(handle.fileno(), start, os.SEEK_HOLE)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no data after `position`
            return size
    except AttributeError:  # no SEEK_DATA on this platform
        return size
    return min(end, size)


ZERO_BLOCK = bytes(16 * 1024 * 1024)
LARGE = 256 * 1024 * 1024
"""Files larger than this are announced before they are hashed (~1 s/GiB)."""


def file_digests(
    file: Path, size: int, with_blob: bool, progress: Callable[[str], None] | None = None
) -> tuple[str, str | None]:
    """The sha256 of a file (and its git blob id if asked), in one pass. A header-only file's
    hole is hashed as the zeros it reads as, without reading it, and its sha256 is kept in the
    user's cache by the digest of the data before the hole and the size (the same header at the
    same size is the same file wherever it lies)."""
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False) if with_blob else None
    tell = progress or (lambda _: None)
    with file.open("rb") as handle:
        end = data_end(handle, size) if not with_blob else size
        handle.seek(0)  # data_end moved it
        if end > LARGE:
            tell(f"hashing {end / 2**30:.1f} GiB (once)")
        head = hashlib.sha256()
        left = end
        while left > 0 and (block := handle.read(min(CHUNK, left))):
            left -= len(block)
            for digest in (sha256, head, blob):
                if digest is not None:
                    digest.update(block)
    if end == size:
        return sha256.hexdigest(), blob.hexdigest() if blob is not None else None
    key = f"{head.hexdigest()}:{end}:{size}"
    cached = _zero_tail_cache().get(key)
    if isinstance(cached, str) and re.fullmatch(r"[0-9a-f]{64}", cached):
        return cached, None
    if size - end > LARGE:
        tell(f"hashing the {(size - end) / 2**30:.1f} GiB it declares and does not hold (once)")
    zeros = memoryview(ZERO_BLOCK)
    for offset in range(end, size, len(ZERO_BLOCK)):
        sha256.update(zeros[: min(len(ZERO_BLOCK), size - offset)])
    _remember_zero_tail(key, sha256.hexdigest())
    return sha256.hexdigest(), None


def _zero_tail_path() -> Path:
    return cache_home() / "hub-sha256.json"


def _zero_tail_cache() -> dict[str, Any]:
    try:
        cached = json.loads(_zero_tail_path().read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _remember_zero_tail(key: str, sha256: str) -> None:
    entries = {**_zero_tail_cache(), key: sha256}
    kept = dict(list(entries.items())[-256:])
    path = _zero_tail_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(kept, indent=1) + "\n")
        temporary.replace(path)
    except OSError:
        pass  # hashed again next time


class RepoSource(Protocol):
    """What the handler serves from: `MemoryRepos`, `DirectoryRepos`."""

    def repo(self, name: str) -> Repo | None:
        """The repo, or None when there is none of that name."""
        ...
