"""Model fetcher: put a locked file set into a directory, resumably and atomically.

Standard library only: the same file runs in a stock Python image (the fetch Job, the MI300X
host) and as `llm-infra fetch`. Usage:

    fetcher.py fetch --lock LOCK.json --dest DIR [--parallel N] [--retire GLOB ...]
    fetcher.py check --lock LOCK.json --dest DIR

The lock (version 1) names a Hugging Face repo, a revision and the files to place:
`{"version": 1, "repo": ..., "revision": ..., "files": [{"path": repo path, "name": file name
in DIR, "size": bytes or null, "sha256": hex or null}]}`.

Guarantees: a file appears under its final name only once it is complete (and verified when the
lock has its sha256); a partial download is kept as `.<name>.part` and resumed with HTTP Range;
no file named by the lock is ever deleted; a completion marker for exactly this lock is written
only when every file is in place, and `check` (the server's init check) reads only that marker
and the file sizes, so it is fast.
"""

import argparse
import concurrent.futures
import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired

try:  # pydantic validates lock files as ModelFile, and wants this TypedDict before Python 3.12
    from typing_extensions import TypedDict
except ImportError:  # a stock Python image: the standard library's serves the fetcher alone
    from typing import TypedDict

DEFAULT_ENDPOINT = "https://huggingface.co"
STATE_DIR = ".llm-infra"
CHUNK = 8 * 1024 * 1024
# Network reads: read1 allocates a buffer of the size asked for on every call, so ask for what
# one socket read can deliver rather than CHUNK.
NET_CHUNK = 1024 * 1024
PROGRESS_EVERY_S = 5.0

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2
EXIT_NETWORK = 3
EXIT_AUTH = 4
EXIT_NOT_FOUND = 5
EXIT_CHECKSUM = 6
EXIT_DISK = 7


class FetchError(Exception):
    """A failure the user can act on; `exit_code` says which kind."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ModelFile(TypedDict):
    """One file of a model, as a lock names it (the one shape from `llm-infra lock` to here)."""

    path: str
    """Path inside the repo, e.g. `UD-IQ1_M/Model-UD-IQ1_M-00001-of-00003.gguf`."""
    name: str
    """File name on the volume (the server's `-m` points at the first shard's name)."""
    size: NotRequired[int | None]
    """Size in bytes, when known (from the lock)."""
    sha256: NotRequired[str | None]
    """sha256 of the content, when known (from the lock)."""


LOCK_VERSION = 1
"""The lock format: `llm-infra lock` writes it, this fetcher reads its repo, revision and files."""


def model_file_problem(entry: Any) -> str | None:
    """What is wrong with one lock entry, or None: the same rule for `llm-infra lock`, render
    and this fetcher, so a name that would escape the directory never reaches a volume."""
    if not isinstance(entry, dict):
        return "is not an object"
    path, name = entry.get("path"), entry.get("name")
    size, sha256 = entry.get("size"), entry.get("sha256")

    def controls(text: str) -> bool:
        return any(ord(c) < 32 or ord(c) == 127 for c in text)

    if (
        not isinstance(path, str)
        or not path
        or path.startswith("/")
        or controls(path)
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        return f"path {path!r} is not a relative path inside the repo"
    if (
        not isinstance(name, str)
        or not name
        or "/" in name
        or name.startswith(".")
        or controls(name)
    ):
        return f"name {name!r} is not a plain file name (no /, no leading .)"
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        return f"size {size!r} is not a byte count"
    if sha256 is not None and not (
        isinstance(sha256, str)
        and len(sha256) == 64
        and all(c in "0123456789abcdef" for c in sha256)
    ):
        return f"sha256 {sha256!r} is not 64 lowercase hex digits"
    return None


def fetch_document(repo: str, revision: str, files: list[ModelFile]) -> dict[str, Any]:
    """The lock document the fetcher is given: the repo, the revision and exactly these files."""
    return {
        "version": LOCK_VERSION,
        "repo": repo,
        "revision": revision,
        "files": [
            {"path": f["path"], "name": f["name"], "size": f.get("size"), "sha256": f.get("sha256")}
            for f in files
        ],
    }


@dataclass(frozen=True)
class Lock:
    """A parsed lock document and its digest (which names its completion marker)."""

    repo: str
    revision: str
    files: tuple[ModelFile, ...]
    digest: str


def lock_digest(document: dict[str, Any]) -> str:
    """sha256 of the canonical JSON form of a lock document."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_lock(path: Path) -> Lock:
    """Read and check a lock file."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FetchError(f"cannot read lock {path}: {exc}", EXIT_USAGE) from exc
    if document.get("version") != LOCK_VERSION:
        raise FetchError(
            f"lock {path}: unsupported version {document.get('version')!r}", EXIT_USAGE
        )
    files = []
    for index, entry in enumerate(document.get("files", [])):
        problem = model_file_problem(entry)
        if problem:
            raise FetchError(f"lock {path}: files[{index}]: {problem}", EXIT_USAGE)
        name = entry["name"]
        files.append(
            ModelFile(
                path=entry["path"], name=name, size=entry.get("size"), sha256=entry.get("sha256")
            )
        )
    if not files:
        raise FetchError(f"lock {path}: no files", EXIT_USAGE)
    return Lock(document["repo"], document["revision"], tuple(files), lock_digest(document))


def marker_path(dest: Path, lock: Lock) -> Path:
    """Where the completion marker of this lock lives."""
    return dest / STATE_DIR / f"complete-{lock.digest[:16]}.json"


def log(message: str) -> None:
    """Plain log lines: Job logs are not a terminal."""
    print(time.strftime("%Y-%m-%dT%H:%M:%S") + " " + message, flush=True)


def file_url(lock: Lock, item: ModelFile) -> str:
    """The hub's resolve URL of a locked file."""
    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    quoted = urllib.parse.quote(item["path"])
    revision = urllib.parse.quote(lock.revision, safe="")
    return f"{endpoint}/{lock.repo}/resolve/{revision}/{quoted}"


def _request(url: str, method: str = "GET", offset: int = 0) -> urllib.request.Request:
    request = urllib.request.Request(url, method=method)
    token = os.environ.get("HF_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    request.add_header("User-Agent", "llm-infra-fetcher/1")
    return request


def _http_error(exc: urllib.error.HTTPError, url: str) -> FetchError:
    if exc.code in (401, 403):
        return FetchError(
            f"{url}: HTTP {exc.code}: not authorised (gated or private repo: set HF_TOKEN "
            "to a token that has access)",
            EXIT_AUTH,
        )
    if exc.code == 404:
        return FetchError(f"{url}: HTTP 404: no such repo, revision or file", EXIT_NOT_FOUND)
    return FetchError(f"{url}: HTTP {exc.code}", EXIT_NETWORK)


class Progress:
    """Thread-safe byte counter that logs percent, MiB/s and ETA every few seconds."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.last = self.started
        self.lock = threading.Lock()

    def add(self, count: int) -> None:
        with self.lock:
            self.done += count
            now = time.monotonic()
            if now - self.last < PROGRESS_EVERY_S:
                return
            self.last = now
            rate = self.done / max(now - self.started, 1e-6)
            left = max(self.total - self.done, 0)
            eta = left / rate if rate > 0 else float("inf")
            pct = 100.0 * self.done / self.total if self.total else 100.0
            log(f"progress {pct:5.1f}% {rate / 2**20:8.1f} MiB/s ETA {eta:6.0f}s")


def _download(lock: Lock, item: ModelFile, dest: Path, progress: Progress, retries: int) -> None:
    final = dest / item["name"]
    part = dest / f".{item['name']}.part"
    url = file_url(lock, item)
    checksum_failures = 0
    for attempt in range(retries + 1):
        try:
            _download_once(url, item, final, part, progress)
            return
        except FetchError as exc:
            if exc.exit_code == EXIT_CHECKSUM and checksum_failures == 0:
                # The bad bytes are gone with the .part file: one fresh download, then give up.
                checksum_failures += 1
                log(f"{item['name']}: {exc}; downloading it again")
                continue
            if exc.exit_code != EXIT_NETWORK or attempt == retries:
                raise
            delay = min(2**attempt, 60)
            log(f"{item['name']}: {exc}; retry {attempt + 1}/{retries} in {delay}s")
            time.sleep(delay)


def _download_once(url: str, item: ModelFile, final: Path, part: Path, progress: Progress) -> None:
    offset = part.stat().st_size if part.exists() else 0
    expected = item.get("size")
    if expected is not None and offset > expected:
        part.unlink()
        offset = 0
    digest = hashlib.sha256()
    if offset and item.get("sha256"):
        with part.open("rb") as existing:
            while block := existing.read(CHUNK):
                digest.update(block)
    try:
        response = urllib.request.urlopen(_request(url, offset=offset), timeout=60)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and item.get("size") is not None and offset == item.get("size"):
            response = None
        else:
            raise _http_error(exc, url) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{url}: {exc}", EXIT_NETWORK) from exc
    if response is not None:
        with response:
            if offset and response.status != 206:
                # The server ignored Range: start again from byte 0.
                offset = 0
                digest = hashlib.sha256()
            mode = "ab" if offset else "wb"
            try:
                with part.open(mode) as out:
                    while True:
                        try:
                            # read1: whatever has arrived, so a killed fetcher leaves it on disk.
                            block = response.read1(NET_CHUNK)
                        except OSError as exc:
                            raise FetchError(f"{url}: {exc}", EXIT_NETWORK) from exc
                        if not block:
                            break
                        out.write(block)
                        digest.update(block)
                        progress.add(len(block))
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as exc:
                if exc.errno == 28:
                    raise FetchError(f"{part}: disk full: {exc}", EXIT_DISK) from exc
                raise
    size = part.stat().st_size
    sha256 = item.get("sha256")
    if expected is not None and size != expected:
        raise FetchError(
            f"{item['name']}: got {size} bytes, expected {expected} (connection ended early)",
            EXIT_NETWORK,
        )
    if sha256 and digest.hexdigest() != sha256:
        part.unlink()
        raise FetchError(
            f"{item['name']}: sha256 {digest.hexdigest()} does not match the lock's {sha256}",
            EXIT_CHECKSUM,
        )
    os.replace(part, final)
    if sha256:
        _write_record(final.parent, item, sha256)
    log(f"{item['name']}: complete ({size} bytes{', sha256 verified' if sha256 else ''})")


def _record_path(dest: Path, item: ModelFile) -> Path:
    return dest / STATE_DIR / "verified" / f"{item['name']}.json"


def _write_record(dest: Path, item: ModelFile, sha256: str) -> None:
    stat = (dest / item["name"]).stat()
    record = _record_path(dest, item)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256})
    )
    os.replace(tmp, record)


def _has_current_record(dest: Path, item: ModelFile) -> bool:
    try:
        record = json.loads(_record_path(dest, item).read_text())
    except (OSError, ValueError):
        return False
    stat = (dest / item["name"]).stat()
    return bool(
        record.get("sha256") == item.get("sha256")
        and record.get("size") == stat.st_size
        and record.get("mtime_ns") == stat.st_mtime_ns
    )


def sha256_of(path: Path) -> str:
    """sha256 of a file, read once in large blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def is_complete(dest: Path, item: ModelFile) -> bool:
    """True when the final file is this lock's file: size, and sha256 via a current record."""
    final = dest / item["name"]
    if not final.is_file():
        return False
    expected = item.get("size")
    if expected is not None and final.stat().st_size != expected:
        log(f"{item['name']}: size {final.stat().st_size} differs from the lock's {expected}")
        return False
    if item.get("sha256") is None or _has_current_record(dest, item):
        return True
    # A file from an earlier tool or an older lock: hash it once, then trust the record.
    log(f"{item['name']}: verifying the existing file")
    actual = sha256_of(final)
    if actual != item.get("sha256"):
        log(f"{item['name']}: sha256 {actual} differs from the lock's; downloading it again")
        return False
    _write_record(dest, item, actual)
    return True


def retired_files(dest: Path, lock: Lock, patterns: list[str]) -> list[Path]:
    """Files matching the retired patterns, never a file (or partial) of this lock."""
    keep = {f["name"] for f in lock.files} | {f".{f['name']}.part" for f in lock.files}
    return [
        entry
        for entry in sorted(dest.iterdir())
        if entry.name not in keep
        and entry.name != STATE_DIR
        and entry.is_file()
        and any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in patterns)
    ]


def bytes_still_needed(dest: Path, missing: list[ModelFile]) -> int:
    """Bytes left to download for the missing files whose size the lock knows."""
    needed = 0
    for item in missing:
        size = item.get("size")
        if size is None:
            continue
        part = dest / f".{item['name']}.part"
        have = part.stat().st_size if part.exists() else 0
        needed += max(size - have, 0)
    return needed


@contextlib.contextmanager
def exclusive(dest: Path) -> Iterator[None]:
    """Hold the directory's fetch lock: a second fetcher waits instead of corrupting files."""
    state = dest / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    with (state / "fetch.lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another fetcher holds this directory; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def fetch(
    lock: Lock,
    dest: Path,
    parallel: int,
    retired: list[str],
    retries: int = 5,
    free_space: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> None:
    """Place every file of the lock in dest, then write the lock's completion marker."""
    dest.mkdir(parents=True, exist_ok=True)
    with exclusive(dest):
        missing = [item for item in lock.files if not is_complete(dest, item)]
        for item in lock.files:
            if item not in missing:
                log(f"{item['name']}: already complete, skipped")
        needed = bytes_still_needed(dest, missing)
        free = free_space(dest)
        old = retired_files(dest, lock, retired)
        reclaimable = sum(path.stat().st_size for path in old)
        if needed > free + reclaimable:
            # Nothing is deleted: the old model stays usable when the new one cannot fit anyway.
            raise FetchError(
                f"disk full: {needed / 2**30:.2f} GiB still needed, {free / 2**30:.2f} GiB free "
                f"in {dest} and {reclaimable / 2**30:.2f} GiB in retired files; free "
                f"{(needed - free - reclaimable) / 2**30:.2f} GiB or grow the volume",
                EXIT_DISK,
            )
        for path in old:
            size = path.stat().st_size
            path.unlink()
            log(f"retired {path.name} ({size} bytes)")
        progress = Progress(needed)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
            futures = [pool.submit(_download, lock, i, dest, progress, retries) for i in missing]
            for future in futures:
                future.result()
        marker = marker_path(dest, lock)
        record = {
            "lock_digest": lock.digest,
            "files": [
                {"name": i["name"], "size": (dest / i["name"]).stat().st_size} for i in lock.files
            ],
        }
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, marker)
        log(f"all {len(lock.files)} files complete; marker {marker.name}")


def check(lock: Lock, dest: Path) -> list[str]:
    """Problems that stop a server from starting on dest (empty when the set is complete)."""
    marker = marker_path(dest, lock)
    if not marker.is_file():
        return [f"{dest}: no completion marker for this lock ({marker.name}): run the fetch first"]
    record = json.loads(marker.read_text())
    problems = []
    if record.get("lock_digest") != lock.digest:
        problems.append(f"{marker}: written for another lock")
    sizes = {f["name"]: f["size"] for f in record.get("files", [])}
    for item in lock.files:
        final = dest / item["name"]
        if not final.is_file():
            problems.append(f"{final}: missing")
        elif final.stat().st_size != sizes.get(item["name"]):
            problems.append(f"{final}: size {final.stat().st_size} differs from the marker's")
    return problems


def add_check_options(parser: argparse.ArgumentParser) -> None:
    """Options of `check` (`llm-infra check-model`)."""
    parser.add_argument("--lock", type=Path, required=True, help="lock file (JSON)")
    parser.add_argument("--dest", type=Path, required=True, help="directory for the files")


def add_fetch_options(parser: argparse.ArgumentParser) -> None:
    """Options of `fetch` (`llm-infra fetch`)."""
    add_check_options(parser)
    parser.add_argument("--parallel", type=int, default=3, help="files downloaded at once")
    parser.add_argument(
        "--retire",
        action="append",
        default=[],
        metavar="GLOB",
        help="delete files matching GLOB (never files of the lock)",
    )
    parser.add_argument(
        "--retries", type=int, default=5, help="retries per file on connection errors and HTTP 5xx"
    )


def run_check(args: argparse.Namespace) -> int:
    """The server's init check: 0 when the locked set is complete, 1 when not."""
    try:
        lock = load_lock(args.lock)
    except FetchError as exc:
        log(f"error: {exc}")
        return exc.exit_code
    problems = check(lock, args.dest)
    for problem in problems:
        log(f"model check: {problem}")
    if not problems:
        log(f"model check: {len(lock.files)} files complete")
    return EXIT_INCOMPLETE if problems else EXIT_OK


def run_fetch(args: argparse.Namespace) -> int:
    """Fetch the locked set; the exit code says which kind of failure stopped it."""
    try:
        fetch(load_lock(args.lock), args.dest, args.parallel, args.retire, args.retries)
    except FetchError as exc:
        log(f"error: {exc}")
        return exc.exit_code
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (`fetcher.py fetch|check ...`); returns the exit code."""
    parser = argparse.ArgumentParser(prog="fetcher.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_fetch_options(sub.add_parser("fetch", help="download the locked files"))
    add_check_options(sub.add_parser("check", help="check that the locked set is complete"))
    args = parser.parse_args(argv)
    return run_check(args) if args.command == "check" else run_fetch(args)


if __name__ == "__main__":
    sys.exit(main())
