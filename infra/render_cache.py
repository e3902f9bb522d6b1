"""Renders kept for the next `llm-infra diff`: a commit's, and a working tree's.

A render is a function of what the render reads: the commit's tree (code, stack files, locks; a
`git worktree` of it holds nothing else) or the working tree's content (`working_tree_id` in
`infra.cli.diff`), the stack named, the interpreter and the installed packages it imports, and
the environment variables that steer Python, Pulumi or llm-infra. The key is the sha256 of
exactly those, so a cached render is the render that would be made again; anything else (a stack
file outside the repository, which no tree holds) is not cached. Entries are written aside and
renamed into place, so a half-written one never counts; the least recently used beyond `KEEP`
are removed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from infra.user_cache import cache_home

# Bumped when what an entry holds changes, so older entries are never read.
CACHE_FORMAT = 1
KEEP = 16
# Environment variables a render may read: the interpreter's, Pulumi's and llm-infra's own.
_ENV_PREFIXES = ("PYTHON", "PULUMI_", "LLM_INFRA_", "HF_")


def renders_dir() -> Path:
    """Where cached renders live."""
    return cache_home() / "renders"


@functools.cache
def _packages() -> tuple[str, ...]:
    """Every installed distribution as NAME==VERSION, sorted (read once per process)."""
    return tuple(
        sorted(
            f"{dist.metadata['Name']}=={dist.version}"
            for dist in importlib.metadata.distributions()
        )
    )


def render_key(tree: str, stack: str, env: Mapping[str, str]) -> str:
    """The cache key of the render of the stack whose file is `stack` (its path in the tree)
    from `tree` (a git tree id, or a working tree's id), run by this interpreter with `env`."""
    steering = {name: value for name, value in env.items() if name.startswith(_ENV_PREFIXES)}
    document = {
        "format": CACHE_FORMAT,
        "tree": tree,
        "stack": stack,
        "python": [sys.executable, sys.version],
        "packages": _packages(),
        "env": dict(sorted(steering.items())),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def cached_render(key: str) -> Path | None:
    """The cached render directory for key, or None; a hit counts as a use."""
    entry = renders_dir() / key
    if not (entry / "render").is_dir():
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)
    return entry / "render"


def keep_render(key: str, render: Path) -> None:
    """Copy a finished render into the cache (best effort: a cache that cannot be written is no
    reason to fail a diff), then drop the least recently used entries beyond KEEP."""
    root = renders_dir()
    aside = root / f".{key}.{os.getpid()}.tmp"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(render, aside / "render", symlinks=True)
        try:
            aside.rename(root / key)
        except OSError:
            # Another diff stored the same key first: the same render.
            shutil.rmtree(aside, ignore_errors=True)
        _prune(root)
    except OSError:
        shutil.rmtree(aside, ignore_errors=True)


def _prune(root: Path) -> None:
    """Remove entries beyond the KEEP most recently used (and leftovers of dead writers)."""
    entries = []
    for path in root.iterdir():
        with contextlib.suppress(OSError):
            if path.name.startswith(".") and path.stat().st_mtime < time.time() - 3600:
                shutil.rmtree(path, ignore_errors=True)
            elif not path.name.startswith("."):
                entries.append((path.stat().st_mtime, path))
    for _, path in sorted(entries, reverse=True)[KEEP:]:
        shutil.rmtree(path, ignore_errors=True)
