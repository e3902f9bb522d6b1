"""Where llm-infra keeps what it can make again: `${XDG_CACHE_HOME:-~/.cache}/llm-infra`."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """The user's cache directory for llm-infra (XDG base directory convention)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-infra"
