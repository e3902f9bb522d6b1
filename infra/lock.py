"""Model locks: a stack's model resolved to one commit, exact files, sizes and sha256.

`llm-infra lock STACK` resolves `model.repo`, `model.revision` and the `model.files` patterns
through `huggingface_hub` and writes `stacks/STACK.lock.json` (reviewed in pull requests).
`render` and `pulumi up` then read only the lock, so a deploy never floats and a new upstream
commit shows up as a diff of the lock. The HF token is used to resolve, never written.
"""

from __future__ import annotations

from infra.lock_format import (
    GgufSummary,
    MetadataScalar,
    ModelLock,
    lock_document,
    lock_files_problem,
    read_lock,
    repo_path_matches,
    write_lock,
)
from infra.lock_resolve import (
    ENDPOINT_OPTIONS,
    SMALL_FILE_LIMIT,
    HubUnreachable,
    RangeReader,
    gguf_summary,
    resolve_lock,
    small_file_sha256,
)
from infra.lock_source import ModelSource, model_source, stack_model_sources

__all__ = [
    "ENDPOINT_OPTIONS",
    "SMALL_FILE_LIMIT",
    "GgufSummary",
    "HubUnreachable",
    "MetadataScalar",
    "ModelLock",
    "ModelSource",
    "RangeReader",
    "gguf_summary",
    "lock_document",
    "lock_files_problem",
    "model_source",
    "read_lock",
    "repo_path_matches",
    "resolve_lock",
    "small_file_sha256",
    "stack_model_sources",
    "write_lock",
]
