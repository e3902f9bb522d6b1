"""Model locks: a stack's model resolved to one commit, exact files, sizes and sha256.

`llm-infra lock STACK` resolves `model.repo`, `model.revision` and the `model.files` patterns
through `huggingface_hub` and writes `stacks/STACK.lock.json` (reviewed in pull requests).
`render` and `pulumi up` then read only the lock, so a deploy never floats and a new upstream
commit shows up as a diff of the lock. The HF token is used to resolve, never written.
"""

# Over ~400 lines: hub resolution, the lock format and the GGUF summary live here until the
# lock is split by concern.
from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from components.gguf_header import GgufError, tensor_key_bytes
from components.payloads import http_policy
from components.payloads.fetcher import (
    LOCK_VERSION,
    ModelFile,
    model_file_problem,
    token_over_http_problem,
)
from infra.config.base import (
    SHARD_NAME,
    ConfigError,
    RepoModelSettings,
    is_pattern,
    shard_set_problems,
)

MetadataScalar = Annotated[str, Field(max_length=4096)] | int | float | bool | None


class GgufSummary(BaseModel):
    """The GGUF header summary a lock stores (`components.gguf_header.summarize`, schema 1, 2
    or 3), checked field by field: the planner reads every one of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_version: Literal[1, 2, 3] = Field(alias="schema")
    architecture: str = Field(pattern=r"^[a-z0-9_]{1,64}$")
    metadata: dict[
        Annotated[str, Field(max_length=256)],
        MetadataScalar | Annotated[list[MetadataScalar], Field(max_length=64)],
    ] = Field(max_length=4096)
    vocab_size: int | None = Field(ge=0)
    layer_bytes: list[Annotated[int, Field(ge=0)]] = Field(max_length=4096)
    other_tensors: dict[Annotated[str, Field(max_length=256)], Annotated[int, Field(ge=0)]] = Field(
        max_length=65536
    )
    total_bytes: int = Field(ge=0)
    tensor_count: int = Field(ge=0)
    matmul_weights: (
        dict[
            Annotated[str, Field(pattern=r"^([0-9]{1,4}|output)$")],
            Annotated[
                dict[Annotated[str, Field(max_length=256)], Annotated[int, Field(ge=1)]],
                Field(max_length=65536),
            ],
        ]
        | None
    ) = Field(default=None, max_length=4097)
    """(schema 2) per layer index and `output`: `TYPE ne0xne1[xne2]` -> how many (the CPU
    repack rules read them); absent from a schema 1 summary."""
    tensors: (
        dict[
            Annotated[str, Field(max_length=256)],
            Annotated[str, Field(pattern=r"^[A-Z0-9_]{1,16} [0-9]{1,12}(x[0-9]{1,12}){0,3}$")],
        ]
        | None
    ) = Field(default=None, max_length=65536)
    """(schema 3) every tensor by name: `TYPE ne0xne1[...]`, what tensor overrides (`-ot`,
    `--n-cpu-moe`) move by name; absent from a schema 1 or 2 summary."""

    @model_validator(mode="after")
    def _total_is_the_sum(self) -> GgufSummary:
        if (self.matmul_weights is None) != (self.schema_version == 1):
            raise ValueError("matmul_weights is in a schema 2 or 3 summary, and only there")
        if (self.tensors is None) != (self.schema_version < 3):
            raise ValueError("tensors is in a schema 3 summary, and only there")
        if self.tensors is not None:
            try:
                listed = sum(tensor_key_bytes(key) for key in self.tensors.values())
            except GgufError as exc:
                raise ValueError(f"tensors: {exc}") from None
            if listed != self.total_bytes:
                raise ValueError(
                    f"tensors add up to {listed} bytes, not total_bytes {self.total_bytes}"
                )
        parts = sum(self.layer_bytes) + sum(self.other_tensors.values())
        if parts != self.total_bytes:
            raise ValueError(
                f"total_bytes {self.total_bytes} is not the sum of layer_bytes and "
                f"other_tensors ({parts})"
            )
        return self


class ModelLock(BaseModel):
    """A lock file's content (the fetcher reads the same document), read strictly: a size is
    an integer, never a bool or a numeric string; every string that becomes a file name, a
    label or a message is length-limited."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    version: Literal[1]
    """The lock format's version (`components.payloads.fetcher.LOCK_VERSION`)."""
    repo: str = Field(max_length=96, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$")
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    requested_revision: str = Field(min_length=1, max_length=256)
    patterns: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        min_length=1, max_length=256
    )
    files: list[ModelFile] = Field(min_length=1, max_length=10_000)
    gguf: dict[str, Any] | None = None

    @field_validator("gguf")
    @classmethod
    def _gguf_is_a_summary(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                GgufSummary.model_validate(value)
            except ValidationError as exc:
                raise ValueError(
                    "; ".join(
                        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                        for e in exc.errors()[:5]
                    )
                ) from None
        return value

    def stale_problems(self, model: RepoModelSettings, path: Path) -> list[str]:
        """Why this lock no longer describes the stack's model (empty when it does)."""
        wanted = (model.repo, model.revision, list(model.files))
        locked = (self.repo, self.requested_revision, self.patterns)
        if wanted == locked:
            return []
        return [
            f"model: the lock {path} was made for {self.repo}@{self.requested_revision} "
            f"{self.patterns}, the stack asks for {model.repo}@{model.revision} "
            f"{list(model.files)} (run: llm-infra lock STACK)"
        ]

    @model_validator(mode="after")
    def _files_are_sound(self) -> ModelLock:
        problem = lock_files_problem(self.files, self.patterns)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def total_bytes(self) -> int:
        """Bytes of all locked files."""
        return sum(f.get("size") or 0 for f in self.files)


def repo_path_matches(path: str, pattern: str) -> bool:
    """Whether a repo path matches a `model.files` pattern, part by part: `*` stays within one
    folder (`*.json` is `config.json`, not `inference/config.json`), as in a shell glob."""
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(
        fnmatch.fnmatchcase(part, glob) for part, glob in zip(parts, wanted, strict=True)
    )


def lock_files_problem(files: list[ModelFile], patterns: list[str]) -> str | None:
    """What makes a lock's file list unusable, or None: an entry the fetcher would refuse, one
    without a size or sha256, two entries for one file on the volume, a file no pattern names
    or a pattern that names no file, an incomplete GGUF shard set."""
    names: dict[str, str] = {}
    for index, entry in enumerate(files):
        problem = model_file_problem(entry)
        if problem:
            return f"files[{index}]: {problem}"
        for key in ("size", "sha256"):
            if entry.get(key) is None:
                return (
                    f"files[{index}]: {entry['path']!r} has no {key}; every locked file has one "
                    "(re-run: llm-infra lock STACK)"
                )
        if entry["name"] in names:
            return (
                f"files[{index}]: {entry['path']!r} and {names[entry['name']]!r} would both be "
                f"{entry['name']!r} on the volume"
            )
        names[entry["name"]] = entry["path"]
        if not any(repo_path_matches(entry["path"], pattern) for pattern in patterns):
            return f"files[{index}]: {entry['path']!r} matches none of the patterns {patterns}"
    for index, pattern in enumerate(patterns):
        if not any(repo_path_matches(entry["path"], pattern) for entry in files):
            return f"patterns[{index}]: {pattern!r} matches no file of the lock"
    gguf = [name for name in names if name.endswith(".gguf")]
    if gguf:
        problems = shard_set_problems(gguf, key="files")
        if problems:
            return problems[0]
    return None


def read_lock(path: Path) -> ModelLock:
    """Read and validate a lock file (size-limited before it is parsed)."""
    from infra.config.limits import MAX_LOCK_FILE_BYTES, read_limited

    try:
        text = read_limited(path, MAX_LOCK_FILE_BYTES, "lock")
    except ConfigError as exc:
        raise ConfigError([f"model: {p}" for p in exc.problems]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [f"model: {path}: not a readable lock (not UTF-8: {exc.reason})"]
        ) from None
    try:
        return ModelLock.model_validate_json(text)
    except ValidationError as exc:
        problems = [
            ": ".join(
                [
                    str(path),
                    *([".".join(str(p) for p in e["loc"])] if e["loc"] else []),
                    e["msg"].removeprefix("Value error, "),
                ]
            )
            for e in exc.errors()
        ]
        raise ConfigError(problems) from None


def lock_document(lock: ModelLock) -> dict[str, Any]:
    """The JSON document of a lock, keys in a stable order."""
    return lock.model_dump(mode="json", exclude_none=True)


def write_lock(path: Path, lock: ModelLock) -> None:
    """Write a lock file atomically (a reviewer diffs it, so the format is stable)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(lock_document(lock), indent=2) + "\n")
    tmp.replace(path)


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
    base = (endpoint or "https://huggingface.co").rstrip("/")

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
        summary = gguf_summary([url(f["path"]) for f in gguf], token)
    return ModelLock(
        version=LOCK_VERSION,  # type: ignore[arg-type]
        repo=model.repo,
        revision=commit,
        requested_revision=model.revision,
        patterns=list(model.files),
        files=files,
        gguf=summary,
    )


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

    def __init__(self, url: str, token: str | None, first_block: int = 64 * 1024) -> None:
        self.url = url
        self.token = token
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
        if not data:
            raise EOFError(f"{self.url}: ended at byte {start}")
        self.fetched += len(data)
        del self.buffer[: self.position]
        self.position = 0
        self.buffer += data
        # Tokenizer arrays can be megabytes: grow the requests instead of making thousands.
        self.block = min(self.block * 2, 16 * 1024 * 1024)

    def read(self, n: int = -1, /) -> bytes:
        """The next n bytes."""
        while len(self.buffer) - self.position < n:
            self._fetch()
        end = len(self.buffer) if n < 0 else self.position + n
        data = bytes(self.buffer[self.position : end])
        self.position = end
        self.offset += len(data)
        return data


def gguf_summary(urls: list[str], token: str | None) -> dict[str, Any]:
    """The planning summary of GGUF shards, from their headers only (no weight bytes)."""
    from components.gguf_header import GgufError, read_gguf_header, summarize

    headers = []
    for url in urls:
        try:
            headers.append(read_gguf_header(RangeReader(url, token)))
        except (GgufError, EOFError, http_policy.HttpError) as exc:
            problem = (
                f"model.files: cannot read the GGUF header of {http_policy.shorten(url)}: {exc}"
            )
            if isinstance(exc, http_policy.HttpError) and _network_fault(exc):
                raise HubUnreachable(problem) from None
            raise ConfigError([problem]) from None
    return summarize(headers)


class ModelSource(BaseModel):
    """What the program deploys: the locked files, or (preview only) the config's exact paths."""

    model_config = ConfigDict(frozen=True)

    revision: str
    files: list[ModelFile]
    locked: bool
    gguf: dict[str, Any] | None = None
    """The lock's GGUF header summary (`components.gguf_header.summarize`), when it has one."""


def model_source(model: RepoModelSettings, lock_path: Path, preview: bool) -> ModelSource:
    """The files to deploy; `pulumi up` refuses an unlocked or stale model."""
    if lock_path.is_file():
        lock = read_lock(lock_path)
        problems = lock.stale_problems(model, lock_path)
        if problems:
            raise ConfigError(problems)
        return ModelSource(
            revision=lock.revision, files=list(lock.files), locked=True, gguf=lock.gguf
        )
    missing = f"model: no lock file {lock_path} (run: llm-infra lock STACK, and commit it)"
    if not preview:
        raise ConfigError([f"{missing}; `pulumi up` deploys only locked models"])
    if any(is_pattern(path) for path in model.files):
        # Nothing to name yet: a preview shows the stack with no files, `pulumi up` refuses.
        return ModelSource(revision=model.revision, files=[], locked=False)
    return ModelSource(
        revision=model.revision,
        files=[
            ModelFile(path=path, name=name)
            for path, name in zip(model.files, model.file_names, strict=True)
        ],
        locked=False,
    )


def stack_model_sources(stack: Any, lock_path: Path, preview: bool) -> list[ModelSource]:
    """The ModelSource of each server of a stack (one for a single-server stack), a problem
    named by the server's key (`servers[1].model: ...`)."""
    sources = []
    paths = stack.lock_paths(lock_path)
    for index, (server, path) in enumerate(zip(stack.server_stacks(), paths, strict=True)):
        try:
            sources.append(model_source(server.model, path, preview))
        except ConfigError as exc:
            raise ConfigError([stack.server_key(p, index) for p in exc.problems]) from None
    return sources
