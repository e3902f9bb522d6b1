"""The lock file's format: one versioned document of a model's commit, files, sizes and sha256."""

from __future__ import annotations

import fnmatch
import json
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
from components.grammars import Architecture
from components.payloads.fetcher import (
    ModelFile,
    model_file_problem,
)
from infra.config.base import (
    ConfigError,
    RepoModelSettings,
    shard_set_problems,
)

MetadataScalar = Annotated[str, Field(max_length=4096)] | int | float | bool | None


class GgufSummary(BaseModel):
    """The GGUF header summary a lock stores (`components.gguf_header.summarize`, schema 1, 2
    or 3), checked field by field: the planner reads every one of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_version: Literal[1, 2, 3] = Field(alias="schema")
    architecture: Architecture
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
    draft: ModelLock | None = None
    """The speculative draft model (`server.speculative.draft`), locked as the model is; a
    draft's own lock has none."""

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

    def stale_problems(
        self, model: RepoModelSettings, path: Path, draft: RepoModelSettings | None = None
    ) -> list[str]:
        """Why this lock no longer describes the stack's model and draft (empty when it
        does)."""
        wanted = (model.repo, model.revision, list(model.files))
        locked = (self.repo, self.requested_revision, self.patterns)
        problems = []
        if wanted != locked:
            problems.append(
                f"model: the lock {path} was made for {self.repo}@{self.requested_revision} "
                f"{self.patterns}, the stack asks for {model.repo}@{model.revision} "
                f"{list(model.files)} (run: llm-infra lock STACK)"
            )
        key = "server.speculative.draft"
        if draft is None and self.draft is not None:
            problems.append(
                f"{key}: the lock {path} pins the draft {self.draft.repo}, the stack has none "
                "(run: llm-infra lock STACK)"
            )
        elif draft is not None and self.draft is None:
            problems.append(
                f"{key}: the lock {path} pins no draft, the stack asks for {draft.repo} "
                "(run: llm-infra lock STACK)"
            )
        elif draft is not None and self.draft is not None:
            problems += [
                p.replace("model: ", f"{key}: ", 1).replace("the lock", "the lock's draft", 1)
                for p in self.draft.stale_problems(draft, path)
            ]
        return problems

    @model_validator(mode="after")
    def _files_are_sound(self) -> ModelLock:
        problem = lock_files_problem(self.files, self.patterns)
        if problem:
            raise ValueError(problem)
        if self.draft is not None and self.draft.draft is not None:
            raise ValueError("draft: a draft's lock holds no draft of its own")
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
