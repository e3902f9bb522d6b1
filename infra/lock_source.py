"""Where a stack's models come from: its lock when there is one, else a preview of the stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
)

from components.payloads.fetcher import (
    ModelFile,
)
from infra.config.base import (
    ConfigError,
    RepoModelSettings,
    is_pattern,
)
from infra.lock_format import ModelLock, read_lock


class ModelSource(BaseModel):
    """What the program deploys: the locked files, or (preview only) the config's exact paths."""

    model_config = ConfigDict(frozen=True)

    revision: str
    files: list[ModelFile]
    locked: bool
    gguf: dict[str, Any] | None = None
    """The lock's GGUF header summary (`components.gguf_header.summarize`), when it has one."""
    draft: ModelSource | None = None
    """The speculative draft model (`server.speculative.draft`), as the model."""


def model_source(
    model: RepoModelSettings,
    lock_path: Path,
    preview: bool,
    draft: RepoModelSettings | None = None,
) -> ModelSource:
    """The files to deploy (and the speculative draft's); `pulumi up` refuses an unlocked or
    stale model."""
    if lock_path.is_file():
        lock = read_lock(lock_path)
        problems = lock.stale_problems(model, lock_path, draft)
        if problems:
            raise ConfigError(problems)
        return _locked(lock)
    missing = f"model: no lock file {lock_path} (run: llm-infra lock STACK, and commit it)"
    if not preview:
        raise ConfigError([f"{missing}; `pulumi up` deploys only locked models"])
    source = _unlocked(model)
    if draft is not None:
        source = source.model_copy(update={"draft": _unlocked(draft)})
    return source


def _locked(lock: ModelLock) -> ModelSource:
    return ModelSource(
        revision=lock.revision,
        files=list(lock.files),
        locked=True,
        gguf=lock.gguf,
        draft=None if lock.draft is None else _locked(lock.draft),
    )


def _unlocked(model: RepoModelSettings) -> ModelSource:
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
            sources.append(model_source(server.model, path, preview, speculative_draft(server)))
        except ConfigError as exc:
            raise ConfigError([stack.server_key(p, index) for p in exc.problems]) from None
    return sources


def speculative_draft(server_stack: Any) -> RepoModelSettings | None:
    """A server stack's speculative draft model (`server.speculative.draft`), if any."""
    spec = getattr(getattr(server_stack, "server", None), "speculative", None)
    return getattr(spec, "draft", None)
