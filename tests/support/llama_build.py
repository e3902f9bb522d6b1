"""The one llama.cpp b11434 build every test runs (`scripts/build-llama`), and its CPU variants.

The build ships the CPU backend as one loadable library per x86 variant (`GGML_BACKEND_DL` +
`GGML_CPU_ALL_VARIANTS`, as the official images do) in `cpu/`, apart from the executables, so
nothing picks a variant by chance: every process gets `GGML_BACKEND_PATH` naming the one it
runs. `LLM_INFRA_CPU_VARIANT` picks the default variant (`x64`, the baseline, unless set);
`supported_variants()` lists the ones this machine's CPU can run.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-llama"
BUILD_TIMEOUT = 90 * 60.0
"""The first build takes ~20 min on 2 cores; later calls return at once."""
BASELINE_VARIANT = "x64"
VARIANT_ENV = "LLM_INFRA_CPU_VARIANT"


class LlamaBuildError(RuntimeError):
    """The build script failed, or a CPU variant does not exist or cannot run here."""


@functools.cache
def build_root() -> Path:
    """The build's root (`bin/`, `cpu/`, `models/`), built on the first call, then cached."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
        env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get(
            "CMAKE_BUILD_PARALLEL_LEVEL", "2")},
    )  # fmt: skip
    if result.returncode != 0:
        raise LlamaBuildError(f"{BUILD_SCRIPT} failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def binary(name: str) -> Path:
    """An executable of the build: `llama-server`, `ggml-rpc-server` or `test-llama-archs`."""
    path = build_root() / "bin" / name
    if not os.access(path, os.X_OK):
        raise LlamaBuildError(f"{path} is not an executable of the build")
    return path


def stock_llama_server() -> Path:
    """llama-server without the RPC backend beside it, as the stock server images ship it.

    With the RPC backend loaded, b11434 counts RPC as a way to offload
    (`llama_supports_gpu_offload`), so it never prints "no usable GPU found" on a machine
    without a GPU; the stock images, and the gate's tests of them, have no RPC backend."""
    path = build_root() / "bin-norpc" / "llama-server"
    if not os.access(path, os.X_OK):
        raise LlamaBuildError(f"{path} is not an executable of the build")
    return path


def deepseek4_model() -> Path:
    """llama.cpp's own tiny random deepseek4 (`test-llama-archs -a deepseek4 -s 42`)."""
    return build_root() / "models" / "deepseek4-moe.gguf"


def all_variants() -> list[str]:
    """Every CPU variant the build holds, by name (`x64`, `haswell`, `sapphirerapids`, ...)."""
    found = sorted(p.name for p in (build_root() / "cpu").glob("libggml-cpu-*.so"))
    return [re.sub(r"^libggml-cpu-(.+)\.so$", r"\1", name) for name in found]


def variant_library(variant: str) -> Path:
    """The library of one CPU variant."""
    path = build_root() / "cpu" / f"libggml-cpu-{variant}.so"
    if not path.is_file():
        raise LlamaBuildError(f"no CPU variant {variant!r} in the build (has: {all_variants()})")
    return path


def default_variant() -> str:
    """The variant tests run unless they ask for another: `$LLM_INFRA_CPU_VARIANT` or `x64`."""
    return os.environ.get(VARIANT_ENV) or BASELINE_VARIANT


def variant_env(variant: str | None = None) -> dict[str, str]:
    """The environment that makes a build executable load exactly this CPU variant."""
    return {**os.environ, "GGML_BACKEND_PATH": str(variant_library(variant or default_variant()))}


_LOADED = re.compile(r"loaded CPU backend from (\S+)")


@functools.cache
def supported_variants() -> tuple[str, ...]:
    """The variants this machine's CPU runs: ggml loads each and refuses what the CPU lacks."""
    supported = [variant for variant in all_variants() if _loads(variant)[0]]
    if BASELINE_VARIANT not in supported:
        # Once more, to tell a machine too busy to answer in time from a build that is broken.
        loads, seen = _loads(BASELINE_VARIANT)
        if not loads:
            raise LlamaBuildError(
                f"the baseline CPU variant {BASELINE_VARIANT} does not load here: {seen[-2000:]}"
            )
        supported.append(BASELINE_VARIANT)
    return tuple(sorted(supported))


def _loads(variant: str) -> tuple[bool, str]:
    """Whether llama-server loads the variant's library here, and what it printed. llama-server
    logs from a thread of its own and may exit before the line is written (about 1 run in 150
    on a busy 2-core machine), so a clean exit without it is asked again, up to three times."""
    for _ in range(3):
        try:
            result = subprocess.run(
                [str(binary("llama-server")), "-lv", "4", "--list-devices"],
                capture_output=True, text=True, timeout=120, check=False, env=variant_env(variant),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False, "llama-server --list-devices did not answer within 120 s"
        seen = result.stdout + result.stderr
        loaded = _LOADED.search(seen)
        if loaded is not None or result.returncode != 0:
            break
    ok = (
        result.returncode == 0
        and loaded is not None
        and Path(loaded[1]).name.endswith(f"-{variant}.so")
    )
    return ok, f"exit code {result.returncode}: {seen}"
