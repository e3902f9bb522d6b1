"""What llama.cpp b11434's own source says about its architectures, read from the pinned sdist.

`components/llama_archs.json` is this, written once (`python -m tests.support.llama_source`)
and compared with the source by tests/contract/test_llama_archs.py:

- `architectures`: `LLM_ARCH_NAMES` (src/llama-arch.cpp), in its order, less `clip` (a dummy
  only llama-quantize uses) and `(unknown)`;
- `recurrent`, `hybrid`: `llm_arch_is_recurrent` / `llm_arch_is_hybrid` (src/llama-arch.cpp);
- `no_cache`, `own_cache`: the architectures `llama_model::create_memory` (src/llama-model.cpp)
  gives no KV cache (encoders, diffusion models) or a cache type of their own;
- `sliding_window`: those whose `load_arch_hparams` (src/models/*.cpp) sets a sliding-window
  type or pattern;
- `mtp_skip`: those whose loader skips the NextN/MTP layers unless MTP is loaded (`load_mtp`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

BUILD = "b11434"
_LEFT_OUT = ("clip", "(unknown)")
_SLIDING = re.compile(r"swa_type\s*=\s*LLAMA_SWA_TYPE_(?!NONE)|load_swa_pattern|set_swa_pattern")


def _block(text: str, start: str) -> str:
    """The text from `start` to the first line that is a lone closing brace."""
    begin = text.index(start)
    end = re.compile(r"^\}", re.M).search(text, begin)
    assert end is not None, start
    return text[begin : end.start()]


def _cases_returning_true(text: str, function: str) -> list[str]:
    body = _block(text, f"bool {function}(")
    return re.findall(r"case (LLM_ARCH_\w+):", body)


def _memory_cases(model_cpp: str) -> tuple[list[str], list[str]]:
    """(no cache, own cache): the architectures `create_memory` names before its default."""
    body = _block(model_cpp, "llama_memory_i * llama_model::create_memory(")
    body = body[: body.index("        default:")]
    no_cache: list[str] = []
    own: list[str] = []
    for group in re.finditer(r"((?:\s*case LLM_ARCH_\w+:)+)\s*\{(.*?)\n            \}", body, re.S):
        names = re.findall(r"LLM_ARCH_\w+", group[1])
        (no_cache if re.search(r"res = nullptr;", group[2]) else own).extend(names)
    return no_cache, own


def _classes(model_cpp: str) -> dict[str, str]:
    """Architecture enum -> the llama_model_* class its factory builds."""
    found: dict[str, str] = {}
    for group in re.finditer(
        r"((?:case LLM_ARCH_\w+:\s*)+)return new (llama_model_\w+)\(", model_cpp
    ):
        for enum in re.findall(r"LLM_ARCH_\w+", group[1]):
            found[enum] = group[2]
    return found


def read(source: Path) -> dict[str, Any]:
    """The architecture data of the llama.cpp tree at `source`."""
    arch_cpp = (source / "src" / "llama-arch.cpp").read_text()
    model_cpp = (source / "src" / "llama-model.cpp").read_text()
    names_block = _block(arch_cpp, "static const std::map<llm_arch, const char *> LLM_ARCH_NAMES")
    names = dict(re.findall(r'\{\s*(LLM_ARCH_\w+),\s*"([^"]+)"\s*\}', names_block))
    models = {p: p.read_text() for p in sorted((source / "src" / "models").glob("*.cpp"))}
    sliding: list[str] = []
    mtp: list[str] = []
    for enum, cls in _classes(model_cpp).items():
        definition = f"void {cls}::load_arch_hparams("
        text = next((t for t in models.values() if definition in t), "")
        hparams = _block(text, definition) if text else ""
        if re.search(
            r"swa_type\s*=\s*LLAMA_SWA_TYPE_(?!NONE)|load_swa_pattern|set_swa_pattern", hparams
        ):
            sliding.append(enum)
        if "load_mtp" in text:
            mtp.append(enum)
    no_cache, own = _memory_cases(model_cpp)

    def named(enums: list[str]) -> list[str]:
        return sorted({names[e] for e in enums if e in names and names[e] not in _LEFT_OUT})

    return {
        "build": BUILD,
        "architectures": [n for n in names.values() if n not in _LEFT_OUT],
        "recurrent": named(_cases_returning_true(arch_cpp, "llm_arch_is_recurrent")),
        "hybrid": named(_cases_returning_true(arch_cpp, "llm_arch_is_hybrid")),
        "no_cache": named(no_cache),
        "own_cache": named(own),
        "sliding_window": named(sliding),
        "mtp_skip": named(mtp),
    }


if __name__ == "__main__":
    json.dump(read(Path(sys.argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
