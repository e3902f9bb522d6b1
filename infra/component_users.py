"""What a Pulumi program that uses the components directly gets from llm-infra's tools.

`from components import GgufModelStore, LlamaCppVulkanServer` builds the resources; these
helpers give such a program what a stack gets from `llm-infra lock` and `llm-infra plan`: the
model files pinned by a lock file (size and sha256, so the fetch Job verifies them), and the
memory verdict for the server's and the store's args on a GPU of a given size.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.model_store.inputs import GgufModelStoreArgs
from components.payloads.fetcher import ModelFile
from components.validation import ComponentInputError, input_problems
from infra.config import ConfigError, quantity_value
from infra.lock import read_lock
from infra.plan.deepseek4 import attention_shape
from infra.plan.extra_args import extra_args_problems, with_extra_args
from infra.plan.llamacpp import (
    DEFAULT_CACHE_RAM_MIB,
    LlamaCppPlanInputs,
    ModelWeights,
    plan_llamacpp,
)
from infra.plan.report import GIB, Plan

__all__ = ["Plan", "memory_plan", "store_files_from_lock"]


def store_files_from_lock(lock_path: str | Path) -> list[ModelFile]:
    """GgufModelStore's `files` from a lock file (`llm-infra lock`), each with size and sha256.

    The lock is read as strictly as a stack's; a bad one is a ConfigError naming the file.
    """
    lock = read_lock(Path(lock_path))
    return [ModelFile(**file) for file in lock.files]


def memory_plan(
    server: LlamaCppVulkanServerArgs,
    store: GgufModelStoreArgs,
    lock_path: str | Path,
    vram_gib: float,
) -> Plan:
    """The plan `llm-infra plan` prints, for a server's and its store's args on `vram_gib`.

    `plan.fits` is the verdict, `plan.table()` the table and `plan.advice` what to change. The
    weights and attention structure come from the lock's GGUF header summary.
    """
    for component, args, args_type in (
        ("LlamaCppVulkanServer", server, LlamaCppVulkanServerArgs),
        ("GgufModelStore", store, GgufModelStoreArgs),
    ):
        problems = input_problems(args, args_type)
        if problems:
            raise ComponentInputError(component, "plan", problems)
    path = Path(lock_path)
    lock = read_lock(path)
    if lock.gguf is None:
        raise ConfigError([f"{path}: no GGUF summary (lock a GGUF model with llm-infra lock)"])
    summary = lock.gguf
    flags = server["flags"]
    limits = server["resources"].get("limits", {})
    memory = limits.get("memory")
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary),
        attention=attention_shape(
            summary["architecture"], summary["metadata"], summary.get("vocab_size")
        ),
        gpu_layers=flags["gpu_layers"],
        ctx_size=flags["ctx_size"],
        parallel=flags["parallel"],
        cache_type_k=flags["cache_type_k"],
        cache_type_v=flags["cache_type_v"],
        vram_bytes=int(vram_gib * GIB),
        memory_limit_bytes=int(quantity_value(memory)) if memory else None,
        cache_ram_mib=DEFAULT_CACHE_RAM_MIB
        if flags.get("cache_ram_mib") is None
        else int(flags.get("cache_ram_mib") or 0),
        disk_bytes=int(quantity_value(store["volume_size"])),
        model_file_bytes=lock.total_bytes,
        upgrade_keeps_old_model=store.get("upgrade", "keep") == "keep",
    )
    words = server.get("extra_args") or []
    plan = plan_llamacpp(with_extra_args(inputs, words, summary))
    extra = extra_args_problems(words, summary, key="extra_args")
    return replace(plan, problems=[*plan.problems, *extra]) if extra else plan
