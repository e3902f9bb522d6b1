"""Fixtures of the contract tests that several modules use."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import llama_archs


@pytest.fixture(scope="module")
def deepseek4_model() -> Path:
    """`deepseek4-moe.gguf`, written by scripts/build-llama (a no-op once cached)."""
    try:
        return llama_archs.deepseek4_model()
    except llama_archs.ArchsBuildError as exc:
        pytest.fail(str(exc))
