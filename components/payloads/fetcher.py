"""Model fetcher: put a locked file set into a directory, resumably and atomically.

Standard library only: the same file runs in a stock Python image (the fetch Job, the MI300X
host) and as `llm-infra fetch`. Usage:

    fetcher.py fetch --lock LOCK.json --dest DIR [--parallel N] [--retire GLOB ...]
                     [--upgrade keep|replace]
    fetcher.py check --lock LOCK.json --dest DIR

The lock (version 1) names a Hugging Face repo, a revision and the files to place:
`{"version": 1, "repo": ..., "revision": ..., "files": [{"path": repo path, "name": file name
in DIR, "size": bytes or null, "sha256": hex or null}]}`. An entry's identity is its repo path;
its name is the path's last part, and no two entries share a path or a name.

Guarantees: a download stays `.<name>.part` (resumed with HTTP Range) until it is complete and
verified, then waits as `.<name>.ready`; only when every file of the lock is verified do the
ready files take their final names (the switch) and the completion marker for exactly this lock
appear, so a model already in DIR stays complete and usable until then, whatever fails before.
Retired files (`--retire`) are deleted after the switch, never a file of the lock; with
`--upgrade replace` they (and files the new set replaces) go first when the disk cannot hold
both. `check` (the server's init check) reads only the marker and the file sizes, so it is fast.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import errno
import fcntl
import fnmatch
import hashlib
import ipaddress
import json
import os
import shutil
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired

try:  # pydantic validates lock files as ModelFile, and wants this TypedDict before Python 3.12
    from typing_extensions import TypedDict
except ImportError:  # a stock Python image: the standard library's serves the fetcher alone
    from typing import TypedDict

if TYPE_CHECKING or "components.payloads" in sys.modules:
    from components.payloads import http_policy
else:  # a script beside http_policy.py: its folder is first on sys.path (unless -I or -P)
    import http_policy

DEFAULT_ENDPOINT = "https://huggingface.co"
STATE_DIR = ".llm-infra"
CHUNK = 8 * 1024 * 1024
# Network reads: read1 allocates a buffer of the size asked for on every call, so ask for what
# one socket read can deliver rather than CHUNK.
NET_CHUNK = 1024 * 1024
PROGRESS_EVERY_S = 30.0
"""Seconds between progress lines in a log (a pod, a file): 120 lines an hour."""
TTY_PROGRESS_EVERY_S = 0.5
"""Seconds between updates of the progress line on a terminal."""

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2
EXIT_NETWORK = 3
EXIT_AUTH = 4
EXIT_NOT_FOUND = 5
EXIT_CHECKSUM = 6
EXIT_DISK = 7
EXIT_SIZE = 8
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as a shell reports a command stopped by Ctrl-C."""

UPGRADE_MODES = ("keep", "replace")
"""`keep`: the old model stays until the new one is verified; `replace`: old files may go first."""
# Names unlike each other: a retire pattern matching all of them would match any file.
_ANY_NAMES = ("x", "model.gguf", "config.json", "README", "Qwen3.6-32B-Q4_K_M.gguf")


class Interrupted(Exception):
    """The fetch was stopped (Ctrl-C): downloads end at their next block, keeping the bytes."""


class FetchError(Exception):
    """A failure the user can act on; `exit_code` says which kind, `retryable` whether another
    try can help (network faults, but never a name that does not resolve)."""

    def __init__(self, message: str, exit_code: int, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.retryable = exit_code == EXIT_NETWORK if retryable is None else retryable


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


MAX_LOCK_BYTES = 16 * 1024 * 1024
"""The largest lock file read (a GGUF summary included, a lock is kilobytes)."""
LOCK_VERSION = 1
"""The lock format: `llm-infra lock` writes it, this fetcher reads its repo, revision and files."""


MAX_NAME_BYTES = 240
"""A file name's longest UTF-8 form: `.NAME.part` must still fit the 255-byte limit of a
file name on Linux file systems."""
MAX_PATH_CHARS = 1024
"""A repo path's longest form (the hub's own limit is far below)."""


def quoted(value: Any, limit: int = 120) -> str:
    """repr(value) cut to a length a message can carry (a hostile lock cannot flood a log)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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
        or len(path) > MAX_PATH_CHARS
        or path.startswith("/")
        or controls(path)
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        return (
            f"path {quoted(path)} is not a relative path inside the repo (at most "
            f"{MAX_PATH_CHARS} characters)"
        )
    if (
        not isinstance(name, str)
        or not name
        or "/" in name
        or name.startswith(".")
        or controls(name)
    ):
        return f"name {quoted(name)} is not a plain file name (no /, no leading .)"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return (
            f"name {quoted(name)} is {len(name.encode('utf-8', 'surrogatepass'))} bytes long; "
            f"at most {MAX_NAME_BYTES} (its download, .NAME.part, must fit a file name)"
        )
    if name != path.rsplit("/", 1)[-1]:
        return f"name {quoted(name)} is not the file name of path {quoted(path)}"
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        return f"size {quoted(size)} is not a byte count"
    if sha256 is not None and not (
        isinstance(sha256, str)
        and len(sha256) == 64
        and all(c in "0123456789abcdef" for c in sha256)
    ):
        return f"sha256 {quoted(sha256)} is not 64 lowercase hex digits"
    return None


def token_over_http_problem(endpoint: str | None, has_token: bool, allowed: bool) -> str | None:
    """A token bound for a plain-http hub endpoint, not stated as intended: the one rule for
    the stack, `llm-infra lock` and this fetcher."""
    if not has_token or allowed or not endpoint:
        return None
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme != "http":
        return None
    host = parts.hostname or ""
    try:
        if host == "localhost" or ipaddress.ip_address(host).is_loopback:
            return None  # never leaves the machine
    except ValueError:
        pass
    return (
        f"{quoted(endpoint)} is plain http and an HF token is set: the token would cross the "
        "network in clear text; use https, or state it (store.allowTokenOverHttp: true, "
        "--allow-token-over-http)"
    )


def retire_pattern_problem(pattern: str, names: list[str]) -> str | None:
    """Why a retire pattern is refused, or None: it must name old files, never the lock's own
    (`names`) and never any file at all (the same rule for render and this fetcher)."""
    if not pattern or "/" in pattern or pattern.startswith("-"):
        return f"{pattern!r} is not a file-name pattern (no /, not starting with -)"
    if all(fnmatch.fnmatchcase(probe, pattern) for probe in _ANY_NAMES):
        return (
            f"{pattern!r} matches any file name: name the retired model's files "
            "(e.g. Qwen3.6*.gguf)"
        )
    matched = sorted(name for name in names if fnmatch.fnmatchcase(name, pattern))
    if matched:
        return (
            f"{pattern!r} matches {matched[0]}, a file of the current model: it would delete the "
            "next model too (name only the retired files)"
        )
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
        with path.open("rb") as handle:
            raw = handle.read(MAX_LOCK_BYTES + 1)
        if len(raw) > MAX_LOCK_BYTES:
            raise ValueError(f"larger than {MAX_LOCK_BYTES} bytes")
        document = json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        raise FetchError(f"cannot read lock {path}: {exc}", EXIT_USAGE) from None
    if not isinstance(document, dict) or document.get("version") != LOCK_VERSION:
        version = document.get("version") if isinstance(document, dict) else document
        raise FetchError(f"lock {path}: unsupported version {quoted(version)}", EXIT_USAGE)
    if not isinstance(document.get("files"), list) or not all(
        isinstance(document.get(key), str) for key in ("repo", "revision")
    ):
        raise FetchError(f"lock {path}: no repo, revision and files list", EXIT_USAGE)
    files = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(document.get("files", [])):
        problem = model_file_problem(entry)
        if problem:
            raise FetchError(f"lock {path}: files[{index}]: {problem}", EXIT_USAGE)
        name = entry["name"]
        if name in seen:
            raise FetchError(
                f"lock {path}: files[{index}]: {entry['path']!r} and {seen[name]!r} would both "
                f"be {name!r} in the directory",
                EXIT_USAGE,
            )
        seen[name] = entry["path"]
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


_LOG_LOCK = threading.Lock()
_status_shown = False
"""True while a terminal shows the progress line (the next log line clears it first)."""


def log(message: str) -> None:
    """Plain log lines: Job logs are not a terminal.

    Downloads run in threads: ``print`` writes the text and its newline separately, so two
    threads could run two lines into one. Each line is one write, under a lock.
    """
    global _status_shown
    line = time.strftime("%Y-%m-%dT%H:%M:%S") + " " + message + "\n"
    with _LOG_LOCK:
        if _status_shown:
            # A terminal's progress line is showing: clear it, the next update redraws it.
            line = "\r\x1b[K" + line
            _status_shown = False
        sys.stdout.write(line)
        sys.stdout.flush()


def file_url(lock: Lock, item: ModelFile) -> str:
    """The hub's resolve URL of a locked file."""
    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    quoted = urllib.parse.quote(item["path"])
    revision = urllib.parse.quote(lock.revision, safe="")
    return f"{endpoint}/{lock.repo}/resolve/{revision}/{quoted}"


def _fetch_error(exc: "http_policy.HttpError", item: ModelFile) -> FetchError:
    """The fetcher's exit code for a failed request (the message is the policy's)."""
    if exc.status in (401, 403):
        return FetchError(
            f"{exc}: gated or private repo: set HF_TOKEN to a token that has access", EXIT_AUTH
        )
    if exc.status == 404:
        return FetchError(f"{exc}: no such repo, revision or file", EXIT_NOT_FOUND)
    expected = item.get("size")
    if isinstance(exc, http_policy.TooLarge) and expected is not None:
        return FetchError(
            f"{item['name']}: {exc}: the lock says {expected} bytes for {item['path']} (re-run "
            "llm-infra lock, or check the endpoint, HF_ENDPOINT / store.hfEndpoint)",
            EXIT_SIZE,
        )
    return FetchError(str(exc), EXIT_NETWORK, retryable=exc.retryable)


def _size(count: float) -> str:
    """A byte count in the unit a person reads at a glance (GiB, MiB or KiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def _sizes(done: float, total: float) -> str:
    """`12.4/87.0 GiB`: both counts in the unit of the total, so they read as one fraction."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if total >= scale:
            return f"{done / scale:.1f}/{total / scale:.1f} {unit}"
    return f"{done:.0f}/{total:.0f} B"


def _duration(seconds: float) -> str:
    """`51m`, `2h05m`, `40s`: how long, to the precision anyone waits by."""
    seconds = max(int(seconds + 0.5), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m" if seconds >= 600 else f"{minutes}m{rest:02d}s"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m"


class Progress:
    """The fetch's progress: bytes of the whole set on disk, speed, ETA and the shards in flight.

    `12.4/87.0 GiB (14%)  25.0 MiB/s  ETA 51m  shard 2/3`. On a terminal it is one line that
    updates in place; in a log (a pod, a file) it is a timestamped line every `every` seconds.
    Bytes already on disk when the run starts count as done but not towards the speed.
    """

    def __init__(
        self,
        total: int,
        already: int = 0,
        shards: int = 1,
        every: float = PROGRESS_EVERY_S,
        tty: bool | None = None,
    ) -> None:
        self.total = total
        self.already = already
        self.done = already
        self.shards = shards
        self.every = (
            TTY_PROGRESS_EVERY_S if (sys.stdout.isatty() if tty is None else tty) else every
        )
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.active: set[int] = set()
        self.stopped = threading.Event()
        self.started = time.monotonic()
        self.last = self.started
        self.lock = threading.Lock()

    def begin(self, shard: int) -> None:
        """Shard number `shard` (1-based) is downloading."""
        with self.lock:
            self.active.add(shard)

    def end(self, shard: int) -> None:
        """Shard number `shard` is no longer downloading."""
        with self.lock:
            self.active.discard(shard)

    def add(self, count: int) -> None:
        """Count `count` new bytes; show the line when it is due.

        Called after every block a download writes, so it is also where a download learns that
        the fetch was interrupted: it stops there, its `.part` file holding every byte so far.
        """
        if self.stopped.is_set():
            raise Interrupted
        with self.lock:
            self.done += count
            now = time.monotonic()
            if now - self.last < self.every:
                return
            self.last = now
            line = self.line(now)
        if self.tty:
            _show_status(line)
        else:
            log(line)

    def rate(self, now: float) -> float:
        """Bytes per second downloaded in this run."""
        return (self.done - self.already) / max(now - self.started, 1e-6)

    def line(self, now: float) -> str:
        """`12.4/87.0 GiB (14%)  25.0 MiB/s  ETA 51m  shard 2/3` (no total: no % and no ETA)."""
        rate = self.rate(now)
        speed = f"{rate / 2**20:.1f} MiB/s"
        if not self.total:
            text = f"{_size(self.done)}  {speed}"
        else:
            left = self.total - min(self.done, self.total)
            eta = _duration(left / rate) if rate > 0 else "?"
            text = f"{_of_total(self.done, self.total)}  {speed}  ETA {eta}"
        if self.active:
            numbers = ",".join(str(n) for n in sorted(self.active))
            text += f"  shard{'s' if len(self.active) > 1 else ''} {numbers}/{self.shards}"
        return text

    def summary(self) -> str:
        """The end: the set's size, the time taken and the average speed of this run."""
        elapsed = time.monotonic() - self.started
        fetched = self.done - self.already
        text = f"{_size(self.total or self.done)} in {_duration(elapsed)}"
        if fetched > 0:
            text += (
                f", {_size(fetched)} downloaded at {self.rate(time.monotonic()) / 2**20:.1f} MiB/s"
            )
        if self.already:
            text += f" ({_size(self.already)} were already on disk)"
        return text


def _show_status(line: str) -> None:
    """Replace the terminal's status line with `line` (no newline: the next one overwrites it)."""
    global _status_shown
    with _LOG_LOCK:
        sys.stdout.write("\r\x1b[K" + line)
        sys.stdout.flush()
        _status_shown = True


def part_path(dest: Path, item: ModelFile) -> Path:
    """Where a download in progress lives (unverified, resumable)."""
    return dest / f".{item['name']}.part"


def ready_path(dest: Path, item: ModelFile) -> Path:
    """Where a verified file waits for the switch to its final name."""
    return dest / f".{item['name']}.ready"


def _announced_size(response: Any, offset: int) -> int | None:
    """The file's full size as the server states it (Content-Range, else Content-Length)."""
    content_range = response.headers.get("Content-Range") or ""
    total = content_range.rpartition("/")[2]
    if total.isdigit():
        return int(total)
    length = response.headers.get("Content-Length")
    if response.status == 200 and length is not None and length.isdigit():
        return int(length)
    if response.status == 206 and length is not None and length.isdigit():
        return offset + int(length)
    return None


def _size_error(item: ModelFile, served: int, expected: int) -> FetchError:
    return FetchError(
        f"{item['name']}: the hub serves {served} bytes for {item['path']}, the lock says "
        f"{expected}: the lock does not describe this file (re-run llm-infra lock, or check the "
        "endpoint, HF_ENDPOINT / store.hfEndpoint)",
        EXIT_SIZE,
    )


def _receive(
    response: "http_policy.Response",
    item: ModelFile,
    part: Path,
    offset: int,
    digest: "hashlib._Hash",
    progress: Progress,
) -> "hashlib._Hash":
    """Append the response body to the .part file, hashing as it arrives; the digest of the
    whole .part file."""
    expected = item.get("size")
    if offset and response.status != 206:
        # The server ignored Range: start again from byte 0.
        offset = 0
        digest = hashlib.sha256()
    served = _announced_size(response, offset)
    if expected is not None and served is not None and served != expected:
        # A wrong lock, not a network fault: no body read, no retry.
        raise _size_error(item, served, expected)
    if expected is not None:
        try:
            response.limit(expected - offset)
        except http_policy.HttpError as exc:
            raise _fetch_error(exc, item) from None
    try:
        with part.open("ab" if offset else "wb") as out:
            while True:
                try:
                    # Whatever has arrived, so a killed fetcher leaves it on disk.
                    block = response.read1(NET_CHUNK)
                except http_policy.TooLarge as exc:
                    out.close()
                    part.unlink()
                    raise _fetch_error(exc, item) from None
                except http_policy.HttpError as exc:
                    raise _fetch_error(exc, item) from None
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
    return digest


LIMITS = http_policy.Limits(deadline_s=None, min_rate=16 * 1024)
"""A download may take hours: the minimum rate and the fetch's own deadline bound it."""
DEFAULT_DEADLINE_S = 12 * 3600


def _download(
    lock: Lock,
    item: ModelFile,
    dest: Path,
    progress: Progress,
    retries: int,
    limits: "http_policy.Limits" = LIMITS,
    deadline: float | None = None,
) -> None:
    url = file_url(lock, item)
    checksum_failures = 0
    for attempt in range(retries + 1):
        left = None if deadline is None else deadline - time.monotonic()
        try:
            if left is not None and left <= 0:
                raise FetchError(
                    f"{item['name']}: not complete within the fetch's deadline (--deadline)",
                    EXIT_NETWORK,
                    retryable=False,
                )
            _download_once(url, item, dest, progress, dataclasses.replace(limits, deadline_s=left))
            return
        except FetchError as exc:
            if exc.exit_code == EXIT_CHECKSUM and checksum_failures == 0:
                # The bad bytes are gone with the .part file: one fresh download, then give up.
                checksum_failures += 1
                log(f"{item['name']}: {exc}; downloading it again")
                continue
            if not exc.retryable or attempt == retries:
                raise
            delay = min(2**attempt, 60)
            if deadline is not None and time.monotonic() + delay > deadline:
                raise FetchError(
                    f"{exc}; no retry: the fetch's deadline (--deadline) has passed", EXIT_NETWORK
                ) from None
            log(f"{item['name']}: {exc}; retry {attempt + 1}/{retries} in {delay}s")
            time.sleep(delay)


def _download_once(
    url: str, item: ModelFile, dest: Path, progress: Progress, limits: "http_policy.Limits"
) -> None:
    part = part_path(dest, item)
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
    headers = {"User-Agent": "llm-infra-fetcher/1"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        # The body is limited to the lock's size once the status is known (_receive): an
        # endless body cannot fill the disk.
        response = http_policy.request(
            url,
            headers=headers,
            token=os.environ.get("HF_TOKEN") or None,
            limits=limits,
            ok=(200, 206, 416),
        )
    except http_policy.HttpError as exc:
        raise _fetch_error(exc, item) from None
    with response:
        if response.status == 416:
            # Nothing past the .part file: it is complete if the file has the lock's size.
            served = _announced_size(response, offset)
            if expected is not None and served is not None and served != expected:
                raise _size_error(item, served, expected)
            if expected is None or offset != expected:
                raise FetchError(f"{http_policy.shorten(url)}: HTTP 416", EXIT_NETWORK)
        else:
            digest = _receive(response, item, part, offset, digest, progress)
    size = part.stat().st_size
    sha256 = item.get("sha256")
    if expected is not None and size > expected:
        part.unlink()
        raise _size_error(item, size, expected)
    if expected is not None and size < expected:
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
    ready = ready_path(dest, item)
    os.replace(part, ready)
    if sha256:
        _write_record(dest, ready.name, sha256)
    log(f"{item['name']}: complete ({_size(size)}{', sha256 verified' if sha256 else ''})")


def _record_path(dest: Path, filename: str) -> Path:
    return dest / STATE_DIR / "verified" / f"{filename}.json"


def _write_record(dest: Path, filename: str, sha256: str) -> None:
    stat = (dest / filename).stat()
    record = _record_path(dest, filename)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256})
    )
    os.replace(tmp, record)


def _recorded_sha256(dest: Path, filename: str) -> str | None:
    """The sha256 a current record gives the file (None: no record, or the file changed)."""
    try:
        record = json.loads(_record_path(dest, filename).read_text())
    except (OSError, ValueError):
        return None
    stat = (dest / filename).stat()
    if record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns:
        sha256 = record.get("sha256")
        return sha256 if isinstance(sha256, str) else None
    return None


def sha256_of(path: Path) -> str:
    """sha256 of a file, read once in large blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _is_locked_file(dest: Path, filename: str, item: ModelFile, what: str) -> bool:
    """True when dest/filename is this lock's file: size, and sha256 via a current record."""
    path = dest / filename
    if not path.is_file():
        return False
    expected = item.get("size")
    if expected is not None and path.stat().st_size != expected:
        log(f"{item['name']}: {what} size {path.stat().st_size} differs from the lock's {expected}")
        return False
    sha256 = item.get("sha256")
    if sha256 is None:
        return True
    actual = _recorded_sha256(dest, filename)
    if actual is None:
        # A file from an earlier tool: hash it once, then trust the record.
        log(f"{item['name']}: verifying the {what}")
        actual = sha256_of(path)
        _write_record(dest, filename, actual)
    if actual != sha256:
        log(f"{item['name']}: the {what} has sha256 {actual}, not the lock's")
        return False
    return True


def is_complete(dest: Path, item: ModelFile) -> bool:
    """True when the final file is this lock's file: size, and sha256 via a current record."""
    if _is_locked_file(dest, item["name"], item, "existing file"):
        return True
    if (dest / item["name"]).exists():
        log(f"{item['name']}: downloading the lock's file; the existing one stays until the switch")
    return False


def is_ready(dest: Path, item: ModelFile) -> bool:
    """True when a verified download of this lock's file waits for the switch."""
    ready = ready_path(dest, item)
    if not ready.exists():
        return False
    if _is_locked_file(dest, ready.name, item, "verified download"):
        return True
    # Left by another lock with this name: ours to delete, it is no model anyone serves.
    ready.unlink()
    _record_path(dest, ready.name).unlink(missing_ok=True)
    return False


def _markers(dest: Path) -> dict[Path, set[str]]:
    """Completion markers in dest and the file names each one vouches for."""
    found: dict[Path, set[str]] = {}
    for marker in sorted((dest / STATE_DIR).glob("complete-*.json")):
        try:
            record = json.loads(marker.read_text())
            found[marker] = {str(f["name"]) for f in record.get("files", [])}
        except (OSError, ValueError, KeyError, TypeError):
            found[marker] = set()
    return found


def _drop_markers_naming(dest: Path, names: set[str], keep: Path, why: str) -> None:
    """Remove other locks' markers that vouch for a file about to change: no check passes on a
    set that is no longer whole."""
    for marker, vouched in _markers(dest).items():
        if marker != keep and vouched & names:
            marker.unlink()
            log(f"marker {marker.name} removed: {sorted(vouched & names)[0]} {why}")


def retired_files(dest: Path, lock: Lock, patterns: list[str]) -> list[Path]:
    """Files matching the retired patterns, never a file (or download) of this lock."""
    keep = set()
    for item in lock.files:
        keep |= {item["name"], part_path(dest, item).name, ready_path(dest, item).name}
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
        part = part_path(dest, item)
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


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**24 else f"{count} bytes"


def _delete(dest: Path, paths: list[Path], lock: Lock, why: str) -> None:
    names = {path.name for path in paths}
    _drop_markers_naming(dest, names, marker_path(dest, lock), "is deleted")
    for path in paths:
        size = path.stat().st_size
        path.unlink()
        _record_path(dest, path.name).unlink(missing_ok=True)
        log(f"retired {path.name} ({size} bytes){why}")


LEASE_REFUSED = {
    errno.EACCES: "the file belongs to another user (server.runAsUser changed?)",
    errno.EPERM: "the file belongs to another user (server.runAsUser changed?)",
    errno.EINVAL: "this file system grants no leases",
    errno.ENOLCK: "this file system grants no leases",
}


def in_use(path: Path) -> bool | str:
    """Whether any process on this node (any pod: the kernel keeps one count per file) has the
    file open or mapped, so deleting it would free no space: True, False, or why it cannot be
    told (a string).

    A write lease is granted only on a file nobody else has open; a mapping keeps the file
    open until it is unmapped. Where the lease cannot be asked (another owner, a file system
    without leases) nothing proves the file unused: the caller keeps it.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return f"it cannot be opened ({exc.strerror})"
    try:
        fcntl.fcntl(descriptor, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EBUSY):
            return True
        return LEASE_REFUSED.get(exc.errno or 0, f"a write lease was refused ({exc.strerror})")
    else:
        fcntl.fcntl(descriptor, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    finally:
        os.close(descriptor)


def _replace_old(
    dest: Path,
    lock: Lock,
    old: list[Path],
    needed: int,
    free: int,
    free_space: Callable[[Path], int],
) -> None:
    """Delete the old model's files, then measure the disk again: a file still open or mapped
    (the old server, in any pod), or one no lease can prove unused, is never deleted, and when
    the unlink did not free enough, nothing more is deleted and the download does not start."""
    states = {path: in_use(path) for path in old}
    unknown = [(path, why) for path, why in states.items() if isinstance(why, str)]
    if unknown:
        path, why = unknown[0]
        raise FetchError(
            f"disk full: {_gib(needed)} needed, {_gib(free)} free in {dest}, and whether "
            f"{path.name}{f' and {len(unknown) - 1} more' if len(unknown) > 1 else ''} of the "
            f"old model is still open cannot be told: no write lease could be taken ({why}); "
            "the old model is kept (nothing was deleted). Stop the old server and delete its "
            "files yourself, grow the volume to hold both models, or run the fetch as the "
            "files' owner",
            EXIT_DISK,
        )
    held = [path for path, state in states.items() if state is True]
    if held:
        raise FetchError(
            f"disk full: {_gib(needed)} needed, {_gib(free)} free in {dest}, and "
            f"{held[0].name}{f' and {len(held) - 1} more' if len(held) > 1 else ''} of the old "
            "model is still open or mapped by a running process (the old server?): deleting it "
            "would free nothing while it runs; stop the old server first (nothing was deleted)",
            EXIT_DISK,
        )
    log(
        f"{_gib(needed)} needed, {_gib(free)} free: deleting the old model's files before "
        "the download (upgrade: replace; no model is complete until it ends)"
    )
    size = sum(path.stat().st_size for path in old)
    _delete(dest, old, lock, " to make room")
    after = free_space(dest)
    if after >= needed:
        return
    raise FetchError(
        f"disk full: deleting the old model ({', '.join(p.name for p in old)}) freed "
        f"{_gib(max(after - free, 0))} of its {_gib(size)} (a process may still hold its "
        f"files); {_gib(after)} free, {_gib(needed)} needed in {dest}; nothing more is deleted "
        "and the download did not start",
        EXIT_DISK,
    )


def _make_room(
    dest: Path,
    lock: Lock,
    missing: list[ModelFile],
    retired: list[str],
    upgrade: str,
    free_space: Callable[[Path], int],
) -> None:
    """Refuse a download that cannot fit; with `replace`, delete old files first if that helps."""
    needed = bytes_still_needed(dest, missing)
    free = free_space(dest)
    if needed <= free:
        return
    old = retired_files(dest, lock, retired)
    # Final files the new set replaces (another lock's content under the same name).
    replaced = [dest / i["name"] for i in missing if (dest / i["name"]).is_file()]
    reclaimable = sum(path.stat().st_size for path in [*old, *replaced])
    if upgrade == "replace" and needed <= free + reclaimable:
        _replace_old(dest, lock, [*old, *replaced], needed, free, free_space)
        return
    short = needed - free
    if upgrade == "replace":
        raise FetchError(
            f"disk full: {_gib(needed)} still needed, {_gib(free)} free in {dest} and "
            f"{_gib(reclaimable)} in retired files; free {_gib(short - reclaimable)} or grow the "
            "volume (nothing was deleted)",
            EXIT_DISK,
        )
    hint = (
        f" and {_gib(reclaimable)} in old files, kept until the new model is verified "
        f"(upgrade: keep)"
        if reclaimable
        else ""
    )
    raise FetchError(
        f"disk full: {_gib(needed)} still needed, {_gib(free)} free in {dest}{hint}; free "
        f"{_gib(short)}, grow the volume to hold both models, or accept downtime with "
        "store.upgrade: replace (--upgrade replace: old files go first); nothing was deleted",
        EXIT_DISK,
    )


def _switch(dest: Path, lock: Lock, items: list[ModelFile]) -> None:
    """Give every verified download its final name, then write this lock's marker."""
    marker = marker_path(dest, lock)
    replaced = {i["name"] for i in items if (dest / i["name"]).exists()}
    _drop_markers_naming(dest, replaced, marker, "is replaced by this lock's")
    for item in items:
        ready = ready_path(dest, item)
        os.replace(ready, dest / item["name"])
        sha256 = item.get("sha256")
        if sha256:
            _write_record(dest, item["name"], sha256)
        _record_path(dest, ready.name).unlink(missing_ok=True)
    directory = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
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


def set_size(lock: Lock) -> int | None:
    """Bytes of the whole file set, when the lock knows every file's size."""
    sizes = [item.get("size") for item in lock.files]
    return None if any(size is None for size in sizes) else sum(s for s in sizes if s is not None)


def bytes_on_disk(dest: Path, lock: Lock, missing: list[ModelFile]) -> int:
    """Bytes of the set in dest: verified files whole, downloads in progress as far as they got."""
    kept = 0
    for item in lock.files:
        if item in missing:
            part = part_path(dest, item)
            kept += part.stat().st_size if part.exists() else 0
        else:
            ready = ready_path(dest, item)
            kept += (ready if ready.exists() else dest / item["name"]).stat().st_size
    return kept


def bytes_kept(dest: Path, lock: Lock) -> int:
    """Bytes of the set in dest whatever their state: verified, waiting, or partly downloaded."""
    kept = 0
    for item in lock.files:
        final, ready, part = dest / item["name"], ready_path(dest, item), part_path(dest, item)
        if ready.exists():
            kept += ready.stat().st_size
        elif part.exists():
            kept += part.stat().st_size
        elif final.is_file() and final.stat().st_size == item.get("size"):
            kept += final.stat().st_size
    return kept


def _of_total(count: int, total: int | None) -> str:
    """`34.8/87.0 GiB (40%)`, or `34.8 GiB` when the lock leaves a size out."""
    if not total:
        return _size(count)
    return f"{_sizes(count, total)} ({int(100 * min(count, total) / total)}%)"


def _download_all(
    lock: Lock,
    dest: Path,
    missing: list[ModelFile],
    progress: Progress,
    parallel: int,
    retries: int,
    limits: "http_policy.Limits" = LIMITS,
    deadline: float | None = None,
) -> None:
    """Download the missing files, `parallel` at a time, each within `limits` and all by
    `deadline` (a time.monotonic() value; None: no deadline).

    Ctrl-C (KeyboardInterrupt, which only the main thread sees) tells every download to stop at
    its next block and waits a second for them; what they wrote stays in their `.part` files.
    """
    shard = {item["name"]: number for number, item in enumerate(lock.files, start=1)}

    def download(item: ModelFile) -> None:
        progress.begin(shard[item["name"]])
        try:
            _download(lock, item, dest, progress, retries, limits, deadline)
        finally:
            progress.end(shard[item["name"]])

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(parallel, 1))
    futures = [pool.submit(download, item) for item in missing]
    try:
        for future in futures:
            future.result()
    except KeyboardInterrupt:
        progress.stopped.set()
        pool.shutdown(wait=False, cancel_futures=True)
        concurrent.futures.wait(futures, timeout=1.0)
        raise Interrupted from None
    finally:
        # After a failure the other downloads still finish: the next run needs only the failed one.
        pool.shutdown(wait=not progress.stopped.is_set())


def fetch(
    lock: Lock,
    dest: Path,
    parallel: int,
    retired: list[str],
    retries: int = 5,
    free_space: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
    upgrade: str = "keep",
    progress_every: float = PROGRESS_EVERY_S,
    limits: "http_policy.Limits" = LIMITS,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
) -> None:
    """Place every file of the lock in dest, then write the lock's completion marker.

    Whatever is already in dest stays whole until the new set is verified; retired files go
    after the switch (with `upgrade="replace"`, before the download when it would not fit).
    """
    if upgrade not in UPGRADE_MODES:
        raise FetchError(f"--upgrade {upgrade!r}: one of {', '.join(UPGRADE_MODES)}", EXIT_USAGE)
    names = [item["name"] for item in lock.files]
    for pattern in retired:
        problem = retire_pattern_problem(pattern, names)
        if problem:
            raise FetchError(f"--retire {problem}; nothing was deleted", EXIT_USAGE)
    dest.mkdir(parents=True, exist_ok=True)
    with exclusive(dest):
        waiting: list[ModelFile] = []
        missing: list[ModelFile] = []
        for item in lock.files:
            if is_complete(dest, item):
                log(f"{item['name']}: already complete, skipped")
                ready_path(dest, item).unlink(missing_ok=True)
            elif is_ready(dest, item):
                log(f"{item['name']}: verified earlier, waiting for the others")
                waiting.append(item)
            else:
                missing.append(item)
        _make_room(dest, lock, missing, retired, upgrade, free_space)
        total = set_size(lock)
        already = bytes_on_disk(dest, lock, missing)
        if missing and already:
            log(
                f"resuming: {_of_total(already, total)} already on disk "
                f"({len(lock.files) - len(missing)} of {len(lock.files)} files verified, "
                f"{sum(part_path(dest, i).exists() for i in missing)} partly downloaded)"
            )
        progress = Progress(total or 0, already, len(lock.files), every=progress_every)
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        _download_all(lock, dest, missing, progress, parallel, retries, limits, deadline)
        _switch(dest, lock, [i for i in lock.files if i in waiting or i in missing])
        log(f"done: {progress.summary()}")
        old = retired_files(dest, lock, retired)
        if old:
            _delete(dest, old, lock, " (the new model is verified and in place)")


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


def _add_lock_and_dest(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock", type=Path, required=True, help="lock file (JSON)")
    parser.add_argument("--dest", type=Path, required=True, help="directory for the files")


def add_check_options(parser: argparse.ArgumentParser) -> None:
    """Options of `check` (`llm-infra check-model`)."""
    _add_lock_and_dest(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text log lines, or one JSON document: {complete, lock, dest, files, problems} "
        "(docs/json/check-model.schema.json)",
    )


def add_fetch_options(parser: argparse.ArgumentParser) -> None:
    """Options of `fetch` (`llm-infra fetch`)."""
    _add_lock_and_dest(parser)
    parser.add_argument("--parallel", type=int, default=3, help="files downloaded at once")
    parser.add_argument(
        "--retire",
        action="append",
        default=[],
        metavar="GLOB",
        help="delete files matching GLOB once the new set is in place (never files of the lock; "
        "default: none)",
    )
    parser.add_argument(
        "--upgrade",
        choices=UPGRADE_MODES,
        default="keep",
        help="keep: old files stay until the new set is verified; replace: delete "
        "retired and replaced files first when the disk cannot hold both",
    )
    parser.add_argument(
        "--retries", type=int, default=5, help="retries per file on connection errors and HTTP 5xx"
    )
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help=f"the hub (default: $HF_ENDPOINT, else {DEFAULT_ENDPOINT}); a token for gated or "
        "private repos comes only from $HF_TOKEN, never from the command line",
    )
    parser.add_argument(
        "--allow-token-over-http",
        action="store_true",
        help="send HF_TOKEN to a plain-http hub (--endpoint, HF_ENDPOINT; refused unless stated)",
    )
    parser.add_argument(
        "--progress-every",
        type=float,
        default=PROGRESS_EVERY_S,
        metavar="SECONDS",
        help="seconds between progress lines in a log (a terminal shows one line that updates)",
    )
    parser.add_argument(
        "--min-rate",
        type=float,
        default=LIMITS.min_rate,
        metavar="BYTES_PER_S",
        help="a download slower than this over a minute is cut off and retried",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_S,
        metavar="SECONDS",
        help="the whole fetch, retries included, ends with an error after this long",
    )


def run_check(args: argparse.Namespace) -> int:
    """The server's init check: 0 when the locked set is complete, 1 when not."""
    try:
        lock = load_lock(args.lock)
    except FetchError as exc:
        log(f"error: {exc}")
        return exc.exit_code
    problems = check(lock, args.dest)
    if getattr(args, "output", "text") == "json":
        document = {
            "complete": not problems,
            "lock": str(args.lock),
            "dest": str(args.dest),
            "files": len(lock.files),
            "problems": problems,
        }
        print(json.dumps(document, indent=2, sort_keys=True))
        return EXIT_INCOMPLETE if problems else EXIT_OK
    for problem in problems:
        log(f"model check: {problem}")
    if not problems:
        log(f"model check: {len(lock.files)} files complete")
    return EXIT_INCOMPLETE if problems else EXIT_OK


def run_fetch(args: argparse.Namespace) -> int:
    """Fetch the locked set; the exit code says which kind of failure stopped it."""
    if args.endpoint:
        problem = endpoint_problem(args.endpoint)
        if problem:
            log(f"error: --endpoint {problem}")
            return EXIT_USAGE
        # The one place the endpoint is read (file_url); the flag wins over the environment.
        os.environ["HF_ENDPOINT"] = args.endpoint
    problem = token_over_http_problem(
        os.environ.get("HF_ENDPOINT"),
        bool(os.environ.get("HF_TOKEN")),
        getattr(args, "allow_token_over_http", False),
    )
    if problem:
        log(f"error: {'--endpoint' if args.endpoint else 'HF_ENDPOINT'} {problem}")
        return EXIT_USAGE
    lock = None
    try:
        lock = load_lock(args.lock)
        fetch(
            lock,
            args.dest,
            args.parallel,
            args.retire,
            args.retries,
            upgrade=args.upgrade,
            progress_every=args.progress_every,
            limits=dataclasses.replace(LIMITS, min_rate=args.min_rate),
            deadline_s=args.deadline,
        )
    except FetchError as exc:
        log(f"error: {exc}")
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted):
        return _interrupted(lock, args.dest)
    return EXIT_OK


def _interrupted(lock: Lock | None, dest: Path) -> int:
    """Say what Ctrl-C kept and how to resume; end at once, even with a download stalled."""
    kept = ""
    if lock is not None and dest.is_dir():
        with contextlib.suppress(OSError):
            kept = f"{_of_total(bytes_kept(dest, lock), set_size(lock))} kept in {dest}; "
    log(f"interrupted: {kept}run the same command again to resume (kept bytes stay)")
    if threading.active_count() > 1:
        # A download blocked in a socket read would hold the exit until its timeout.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    return EXIT_INTERRUPTED


def endpoint_problem(url: str) -> str | None:
    """Why a hub endpoint is refused, or None: http(s)://host[:port][/path], nothing else."""
    try:
        http_policy.parse_url(url)
    except http_policy.HttpError as exc:
        reason = str(exc).removeprefix(f"{http_policy.shorten(url)}: ")
        return f"{quoted(url)} is not a hub URL (http(s)://host[:port][/path]): {reason}"
    parsed = urllib.parse.urlsplit(url)
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or parsed.username is not None
        or parsed.query
        or parsed.fragment
        or any(ord(c) <= 32 or ord(c) == 127 for c in url)
    ):
        return f"{url!r} is not a hub URL (http(s)://host[:port][/path], no credentials or query)"
    return None


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
