"""Resolving a lock through the hub: the commit, the files a pattern names, sizes and sha256."""

from __future__ import annotations

import difflib
import hashlib
import urllib.parse
from typing import Any

from pydantic import ValidationError

from components.payloads import http_policy
from components.payloads.fetcher import (
    DEFAULT_ENDPOINT,
    LOCK_VERSION,
    ModelFile,
    model_file_problem,
    token_over_http_problem,
)
from infra.config.base import (
    SHARD_NAME,
    ConfigError,
    RepoModelSettings,
    shard_set_problems,
)
from infra.hub_client import HubAnswerRefused, use_bounded_hub_client
from infra.lock_format import ModelLock, repo_path_matches


def _gguf_hint(pattern: str, paths: list[str], most: int = 12) -> str:
    """What a pattern that matched nothing could have named: the repo's GGUF files, the
    nearest first."""
    ggufs = [path for path in paths if path.endswith(".gguf")]
    if not ggufs:
        return " (the repo has no .gguf file)"
    nearest = difflib.get_close_matches(pattern, ggufs, n=3, cutoff=0.0)
    shown = ", ".join(map(repr, ggufs[:most]))
    listed = shown + (f", ... ({len(ggufs)} in all)" if len(ggufs) > most else "")
    return f"; nearest: {', '.join(map(repr, nearest))}; its GGUF files: {listed}"


def _one_model_problems(paths: list[str]) -> list[str]:
    """The GGUF files selected must be one model: a single file or one split set. Patterns
    that take in several (`*.gguf` over a repo of quants) name each and ask for one."""
    models: dict[str, list[str]] = {}
    for path in paths:
        if not path.endswith(".gguf"):
            continue
        shard = SHARD_NAME.match(path.rsplit("/", 1)[-1])
        folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        key = folder + (shard["prefix"] if shard else path.rsplit("/", 1)[-1])
        models.setdefault(key, []).append(path)
    if len(models) < 2:
        return []
    named = [
        repr(files[0]) if len(files) == 1 else f"{key + '-*.gguf'!r} ({len(files)} shards)"
        for key, files in models.items()
    ]
    return [
        f"model.files: the patterns take in {len(models)} models, not one: {', '.join(named)}; "
        "list the files (or a pattern) of the one to serve"
    ]


ENDPOINT_OPTIONS = (
    "the hub is --endpoint, else store.hfEndpoint, else $HF_ENDPOINT, else huggingface.co; "
    "a token comes from $HF_TOKEN"
)


class HubUnreachable(ConfigError):
    """The hub could not be reached or failed on its side (a network fault, 5xx): trying again
    or another endpoint can help, unlike a wrong repo or token. `llm-infra lock` exits 3."""

    def __init__(self, problem: str) -> None:
        super().__init__([f"{problem} ({ENDPOINT_OPTIONS})"])


def _network_fault(exc: http_policy.HttpError) -> bool:
    """A transport failure or the hub's own trouble (the policy's retryable statuses), not an
    answer about us."""
    return exc.status is None or exc.retryable


def resolve_lock(
    model: RepoModelSettings,
    token: str | None = None,
    endpoint: str | None = None,
    allow_token_over_http: bool = False,
) -> ModelLock:
    """Resolve the model through the hub to a lock; ConfigError with the key on every failure."""
    problem = token_over_http_problem(endpoint, bool(token), allow_token_over_http)
    if problem:
        raise ConfigError([f"--endpoint {problem}"])
    # huggingface_hub 2.x speaks HTTP through httpx2 and lets its transport errors through.
    from httpx2 import TransportError
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.hf_api import RepoFile

    use_bounded_hub_client()
    api = HfApi(endpoint=endpoint, token=token or False)
    where = endpoint or "huggingface.co"
    try:
        info = api.model_info(model.repo, revision=model.revision)
        commit = info.sha
        if commit is None:
            raise ConfigError([f"model.revision: {where} gave no commit for {model.revision!r}"])
        tree = [
            entry
            for entry in api.list_repo_tree(model.repo, revision=commit, recursive=True)
            if isinstance(entry, RepoFile)
        ]
    except GatedRepoError:
        raise ConfigError(
            [f"model.repo: {model.repo!r} is gated or private on {where}: set HF_TOKEN to a "
             "token with access (or `pulumi config set --secret hfToken`)"]
        ) from None  # fmt: skip
    except RevisionNotFoundError:
        raise ConfigError(
            [f"model.revision: {model.revision!r} is not a branch, tag or commit of {model.repo}"]
        ) from None
    except RepositoryNotFoundError:
        hint = "" if token else " (or it is private: set HF_TOKEN)"
        raise ConfigError([f"model.repo: {model.repo!r} not found on {where}{hint}"]) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        message = f"model.repo: {where} answered HTTP {status or '?'} for {model.repo}"
        if status is None or status in http_policy.RETRYABLE_STATUS:
            raise HubUnreachable(message) from None
        raise ConfigError([message]) from None
    except HubAnswerRefused as exc:
        raise ConfigError([f"model.repo: {where}: {exc}"]) from None
    except (OSError, TransportError) as exc:
        raise HubUnreachable(f"model.repo: cannot reach {where}: {exc}") from None

    problems: list[str] = []
    selected: dict[str, RepoFile] = {}
    for index, pattern in enumerate(model.files):
        matches = [e for e in tree if repo_path_matches(e.path, pattern)]
        if not matches:
            problems.append(
                f"model.files[{index}]: {pattern!r} matches no file of {model.repo}@{commit[:12]}"
                + _gguf_hint(pattern, [e.path for e in tree])
            )
        for entry in matches:
            selected[entry.path] = entry
    by_name: dict[str, list[str]] = {}
    for path in sorted(selected):
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    for name, paths in by_name.items():
        if len(paths) > 1:
            problems.append(
                f"model.files: {' and '.join(paths)} would both be {name!r} on the volume (files "
                "are placed by name): narrow the patterns to one of them"
            )
    if problems:
        raise ConfigError(problems)
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")

    def url(path: str) -> str:
        return f"{base}/{model.repo}/resolve/{commit}/{urllib.parse.quote(path)}"

    files = []
    for entry in sorted(selected.values(), key=lambda e: e.path):
        problem = model_file_problem(
            {"path": entry.path, "name": entry.path.rsplit("/", 1)[-1], "size": entry.size}
        )
        if problem:
            raise ConfigError([f"model.files: {entry.path!r} in {model.repo}: {problem}"])
        # Git files (config.json, the chat template) carry no LFS sha256: hash them here.
        sha256 = (
            entry.lfs.sha256
            if entry.lfs is not None
            else small_file_sha256(url(entry.path), entry.size, token)
        )
        files.append(
            ModelFile(
                path=entry.path,
                name=entry.path.rsplit("/", 1)[-1],
                size=entry.size,
                sha256=sha256,
            )
        )
    # The names passed their grammar above: now they may be shown.
    one_model = _one_model_problems([f["path"] for f in files])
    if one_model:
        raise ConfigError(one_model)
    gguf = [f for f in files if f["name"].endswith(".gguf")]
    summary = None
    if gguf:
        problems = shard_set_problems([f["name"] for f in gguf], key="model.files")
        if problems:
            raise ConfigError(problems)
        sizes = [f["size"] if f["size"] is not None else -1 for f in gguf]
        summary = gguf_summary([url(f["path"]) for f in gguf], token, sizes)
    try:
        return ModelLock(
            version=LOCK_VERSION,  # type: ignore[arg-type]
            repo=model.repo,
            revision=commit,
            requested_revision=model.revision,
            patterns=list(model.files),
            files=files,
            gguf=summary,
        )
    except ValidationError as exc:
        # What the hub or a header sent, outside what a lock file may hold.
        raise ConfigError(
            [
                f"model.files: {model.repo}@{commit[:12]} cannot be locked: "
                f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
                for error in exc.errors()[:10]
            ]
        ) from None


SMALL_FILE_LIMIT = 64 * 1024 * 1024
"""Largest git (non-LFS) file `llm-infra lock` downloads to hash (the hub keeps them small)."""


def small_file_sha256(url: str, size: int, token: str | None) -> str:
    """sha256 of a small git file of the repo, downloaded once; its size must be the tree's."""
    if size > SMALL_FILE_LIMIT:
        raise ConfigError(
            [f"model.files: {url} is a {size}-byte file outside LFS: too large to hash at lock"]
        )
    digest = hashlib.sha256()
    got = 0
    try:
        # Never more than the tree's size: a longer answer is an error, not a bigger hash.
        with http_policy.request(url, token=token, max_body=size) as response:
            while block := response.read1():
                digest.update(block)
                got += len(block)
    except http_policy.HttpError as exc:
        problem = f"model.files: cannot read a file to hash it: {exc}"
        raise (HubUnreachable(problem) if _network_fault(exc) else ConfigError([problem])) from None
    if got != size:
        raise ConfigError(
            [f"model.files: {url} sent {got} bytes, the repo tree says {size}: try again"]
        )
    return digest.hexdigest()


class RangeReader:
    """A forward-only file over HTTP Range requests: reads only what the caller consumes."""

    def __init__(
        self, url: str, token: str | None, first_block: int = 64 * 1024, size: int | None = None
    ) -> None:
        self.url = url
        self.token = token
        self.size = size
        """The file's size: the repo tree's, else the first answer's Content-Range total. The
        header reader checks every length the header declares against it."""
        self.offset = 0
        self.buffer = bytearray()
        self.position = 0
        """Where the unread bytes start in `buffer` (a slice per read would copy the rest of a
        16 MiB block for each of a tokenizer's 150,000 strings)."""
        self.block = first_block
        self.fetched = 0

    def _fetch(self) -> None:
        start = self.offset + len(self.buffer) - self.position
        # A server that ignores Range would send the whole shard: read no more than asked.
        with http_policy.request(
            self.url,
            headers={"Range": f"bytes={start}-{start + self.block - 1}"},
            token=self.token,
            max_body=self.block,
            ok=(200, 206),
        ) as response:
            data = response.read_all()
            if self.size is None and response.status == 206:
                total = response.headers.get("Content-Range", "").rpartition("/")[2].strip()
                self.size = int(total) if total.isdigit() else None
        if not data:
            raise EOFError(f"{self.url}: ended at byte {start}")
        self.fetched += len(data)
        del self.buffer[: self.position]
        self.position = 0
        self.buffer += data
        # Tokenizer arrays can be megabytes: grow the requests instead of making thousands.
        self.block = min(self.block * 2, 16 * 1024 * 1024)

    def read(self, n: int = -1, /) -> bytes:
        """The next n bytes (fewer at the end of the file)."""
        if self.size is not None:
            n = min(n, max(self.size - self.offset, 0))
        while len(self.buffer) - self.position < n:
            self._fetch()
        end = len(self.buffer) if n < 0 else self.position + n
        data = bytes(self.buffer[self.position : end])
        self.position = end
        self.offset += len(data)
        return data


def gguf_summary(
    urls: list[str], token: str | None, sizes: list[int] | None = None
) -> dict[str, Any]:
    """The planning summary of GGUF shards, from their headers only (no weight bytes).
    `sizes`: each file's size in the repo tree, which bounds what its header may declare."""
    from components.gguf_header import GgufError, read_gguf_header, summarize

    headers = []
    for index, url in enumerate(urls):
        size = sizes[index] if sizes is not None and sizes[index] >= 0 else None
        try:
            headers.append(read_gguf_header(RangeReader(url, token, size=size)))
        except (GgufError, EOFError, http_policy.HttpError) as exc:
            problem = (
                f"model.files: cannot read the GGUF header of {http_policy.shorten(url)}: {exc}"
            )
            if isinstance(exc, http_policy.HttpError) and _network_fault(exc):
                raise HubUnreachable(problem) from None
            raise ConfigError([problem]) from None
    try:
        return summarize(headers)
    except GgufError as exc:
        names = ", ".join(http_policy.shorten(url.rsplit("/", 1)[-1], 80) for url in urls)
        raise ConfigError([f"model.files: the GGUF header of {names}: {exc}"]) from None
