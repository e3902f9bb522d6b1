"""vLLM's own argument parser, run by the vLLM venv's python on `tests/support/vllm_parse_args.py`
(a script of its own: that venv has no pytest and no project on its path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = Path(__file__).parent / "vllm_parse_args.py"


def vllm_python() -> Path:
    """The vLLM venv's python (LLM_INFRA_VLLM_PYTHON, default .venv-vllm/bin/python)."""
    path = Path(os.environ.get("LLM_INFRA_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not path.is_file():
        pytest.fail(
            f"vLLM venv python not found at {path}: create it as .ci/setup does "
            "(torch==2.13.0 CPU, vllm==0.33.0 --no-deps, its Requires-Dist minus GPU packages) "
            "or set LLM_INFRA_VLLM_PYTHON"
        )
    return path
