"""llama.cpp's own tiny random deepseek4 (`test-llama-archs -a deepseek4 -s 42`).

Written by `scripts/build-llama` with the build's test-llama-archs (~20 min the first time, then
cached; `LLM_INFRA_LLAMA_DIR` moves the cache).
"""

from __future__ import annotations

from pathlib import Path

from tests.support import llama_build


class ArchsBuildError(RuntimeError):
    """The build script did not produce the model."""


def deepseek4_model() -> Path:
    """`deepseek4-moe.gguf` (a no-op once cached); ArchsBuildError with the cause otherwise."""
    try:
        model = llama_build.deepseek4_model()
    except llama_build.LlamaBuildError as exc:
        raise ArchsBuildError(str(exc)) from exc
    if not model.is_file() or model.stat().st_size == 0:
        raise ArchsBuildError(f"{llama_build.BUILD_SCRIPT} left no model at {model}")
    return model
