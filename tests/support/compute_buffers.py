"""llama-server's compute buffers across model shapes, beside the memory plan's figure: the runs
and the table `bench/compute_buffers.py` prints; the tests read the same logs and figures."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# A standard-library payload: a GPU machine's plain Python (no pulumi) imports it.
from components.payloads import gpu_gate

MIB = 1024**2
N_VOCAB = 380
"""The tiny models' vocabulary (tests/support/tiny_gguf.py)."""
LOG_NAME = re.compile(r"e(\d+)-ff(\d+)-c(\d+)-ub(\d+)-ngl(\d+)-(f16|q8_0)\.load\.log")
Key = tuple[int, int, int, int, int, str]
"""(n_embd, n_ff, ctx, ubatch, ngl, KV cache type) of one run."""


def log_name(key: Key) -> str:
    """The load log's file name of a run."""
    return "e{}-ff{}-c{}-ub{}-ngl{}-{}.load.log".format(*key)


def heads(n_embd: int) -> int:
    """Attention heads of a generated shape: 128-wide heads."""
    return max(n_embd // 128, 1)


def write_model(directory: Path, n_embd: int, n_ff: int) -> Path:
    """A 2-layer llama model of the shape (F16 weights), in one GGUF file."""
    import gguf

    from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model

    spec = TinyLlamaSpec(
        n_layer=2, n_embd=n_embd, n_head=heads(n_embd), n_head_kv=heads(n_embd), n_ff=n_ff,
        weight_type=gguf.GGMLQuantizationType.F16,
    )  # fmt: skip
    (model,) = write_tiny_model(directory, directory.name, 1, spec)
    return model


def compute_buffers(
    model: Path, key: Key, log: Path, binary: str | None = None
) -> dict[str, float]:
    """Device → compute buffer MiB llama-server reserves for the model with the run's flags."""
    from tests.support.llama_server import free_port, run_llama_server

    _, _, ctx, ubatch, ngl, cache = key
    argv = [
        "-m", str(model), "--port", str(free_port()), "--threads", "2", "-c", str(ctx),
        "-ub", str(ubatch), "-b", str(max(ubatch, 2048)), "-np", "1", "-ngl", str(ngl),
        "-fa", "on", "-ctk", cache, "-ctv", cache, "-lv", "4", "--log-file", str(log),
    ]  # fmt: skip
    with run_llama_server(argv, binary=binary, log_path=log.with_suffix(".console")):
        pass
    return read_log(log)


def read_log(log: Path) -> dict[str, float]:
    buffers: dict[str, float] = gpu_gate.parse_load_log(
        log.read_text(errors="replace")
    ).compute_buffers_mib
    if not buffers:
        raise SystemExit(f"no compute buffer in {log}")
    return buffers


def shape_of(n_embd: int, n_ff: int) -> Any:
    """The planner's AttentionShape of a generated model (needs the planner's imports)."""
    from infra.plan.deepseek4 import AttentionShape

    n_head = heads(n_embd)
    return AttentionShape(
        kind="standard", n_layer=2, n_head_kv=(n_head, n_head), head_k=n_embd // n_head,
        head_v=n_embd // n_head, n_head=n_head, n_embd=n_embd, n_ff=n_ff, n_vocab=N_VOCAB,
    )  # fmt: skip


def planned_mib(key: Key, device: str) -> float | None:
    """The memory plan's compute item for the device's buffer (`plan_llamacpp` on the run's
    flags: its own placement, copied KV and estimate), or None where the planner cannot be
    imported (a GPU machine's plain Python)."""
    try:
        from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights, plan_llamacpp
    except ImportError:
        return None
    n_embd, n_ff, ctx, ubatch, ngl, cache = key
    on_gpu = device.startswith("Vulkan")
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights((0, 0), 0, 0, "file sizes + layer structure"),
        attention=shape_of(n_embd, n_ff),
        gpu_layers=ngl,
        ctx_size=ctx,
        parallel=1,
        cache_type_k=cache,
        cache_type_v=cache,
        ubatch=ubatch,
        batch=max(ubatch, 2048),
        vram_bytes=1 << 40 if on_gpu else None,
    )
    where = "vram" if on_gpu and device != "Vulkan_Host" else "ram"
    return plan_llamacpp(inputs).devices[where].items["compute"] / MIB


def row(key: Key, device: str, measured_mib: float) -> dict[str, Any]:
    """The figures of one buffer: mask, remainder per token, and the planner's estimate."""
    _, _, ctx, ubatch, *_ = key
    mask_mib = 2 * ctx * ubatch / MIB
    return {
        "device": device,
        "measured": measured_mib,
        "mask": mask_mib,
        "floats_per_token": (measured_mib - mask_mib) * MIB / ubatch / 4,
        "plan": planned_mib(key, device),
    }


def format_table(rows: list[tuple[Key, dict[str, Any]]]) -> str:
    """One line per run and device."""
    lines = [
        "n_embd   n_ff     ctx  ubatch  ngl  kv    device         MiB  mask MiB"
        "  rest floats/token  plan MiB  plan/log"
    ]
    for (n_embd, n_ff, ctx, ubatch, ngl, cache), r in rows:
        plan = r["plan"]
        planned = ("-", "-") if plan is None else (f"{plan:.2f}", f"{plan / r['measured']:.2f}")
        lines.append(
            f"{n_embd:6d} {n_ff:6d} {ctx:7d} {ubatch:7d} {ngl:4d}  {cache:<5} {r['device']:<12} "
            f"{r['measured']:7.2f} {r['mask']:9.2f} {r['floats_per_token']:18.0f} "
            f"{planned[0]:>9} {planned[1]:>9}"
        )
    return "\n".join(lines)


def from_logs(directory: Path) -> list[tuple[Key, dict[str, Any]]]:
    """The rows of the load logs a run kept with --out."""
    rows = []
    for log in sorted(directory.glob("*.load.log")):
        match = LOG_NAME.fullmatch(log.name)
        if match is None:
            continue
        e, ff, c, ub, ngl = (int(v) for v in match.groups()[:5])
        key: Key = (e, ff, c, ub, ngl, match[6])
        rows += [(key, row(key, d, mib)) for d, mib in sorted(read_log(log).items())]
    return rows
