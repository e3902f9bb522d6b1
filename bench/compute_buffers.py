"""llama-server's compute buffers across model shapes, beside the planner's estimate.

    python bench/compute_buffers.py [--shapes 1024:1024,1024:4096] [--ctx 4096,65536]
        [--ubatch 128,512] [--ngl 0] [--binary PATH] [--out DIR | --logs DIR]

For each ``n_embd:n_ff`` shape it writes a 2-layer llama model (F16 weights, 380-token vocab),
starts llama-server b11434 (the project's CPU build, `scripts/build-llama`, unless ``--binary``;
``--ngl 99`` puts it all on a GPU) with ``-fa on`` for each context and ubatch, and prints each
compute buffer the load log reports (``sched_reserve``), the F16 KQ mask (2 x ctx x ubatch
bytes), what remains per token (in floats: the graph's activations as ggml-alloc packs them) and
the planner's figure
(`vulkan_compute_bytes` for a Vulkan device, the upper bound `compute_buffer_bytes`
elsewhere). ``--out`` keeps the load logs (named by shape and flags); ``--logs`` prints the
table from such logs instead of running a server, which is how a GPU machine's logs are read
where the planner can be imported (it needs pulumi's packages).

On the CPU build the remainder is not a linear function of the shape (ggml-alloc reuses a
buffer where sizes happen to match), which is why the planner keeps an upper bound there; on
Vulkan it is (tests/fixtures/gpu_gate/compute/).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# A standard-library payload: a GPU machine's plain Python (no pulumi) imports it.
from components.payloads import gpu_gate  # noqa: E402

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
    """The planner's figure for the buffer, or None where the planner cannot be imported."""
    try:
        from infra.plan.deepseek4 import kv_cache_layers
        from infra.plan.llamacpp import compute_buffer_bytes, vulkan_compute_bytes
    except ImportError:
        return None
    n_embd, n_ff, ctx, ubatch, ngl, cache = key
    shape = shape_of(n_embd, n_ff)
    # As the plan budgets each device (infra.plan.llamacpp.llamacpp_devices): below -ngl 3
    # layer 0 stays on the CPU and its KV cache is copied to the GPU for its ubatch.
    copied = kv_cache_layers(shape, ctx, 1, cache, cache).total[0] if ngl < 3 else 0
    if device == "Vulkan_Host":
        return vulkan_compute_bytes(shape, ctx, ubatch, "host") / MIB
    if device.startswith("Vulkan"):
        return vulkan_compute_bytes(shape, ctx, ubatch, "gpu", copied) / MIB
    return compute_buffer_bytes(shape, ctx, ubatch, flash_attn=True) / MIB


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


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="512:256,1024:256,2048:256,1024:1024,1024:2048,1024:4096")
    p.add_argument("--ctx", type=ints, default=[4096, 65536])
    p.add_argument("--ubatch", type=ints, default=[512])
    p.add_argument("--ngl", type=int, default=0, help="layers on the GPU (99: all)")
    p.add_argument("--cache-type", choices=["f16", "q8_0"], default="f16", help="-ctk and -ctv")
    p.add_argument("--binary", help="llama-server to run (default: scripts/build-llama's)")
    p.add_argument("--out", type=Path, help="keep the load logs here")
    p.add_argument("--logs", type=Path, help="print the table of logs kept with --out")
    a = p.parse_args(argv)
    if a.logs:
        print(format_table(from_logs(a.logs)))
        return 0
    shapes = [tuple(int(v) for v in s.split(":")) for s in a.shapes.split(",") if s]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for n_embd, n_ff in shapes:
            model = write_model(Path(tmp) / f"e{n_embd}-ff{n_ff}", n_embd, n_ff)
            for ctx in a.ctx:
                for ubatch in a.ubatch:
                    key: Key = (n_embd, n_ff, ctx, ubatch, a.ngl, a.cache_type)
                    buffers = compute_buffers(model, key, out / log_name(key), a.binary)
                    rows += [(key, row(key, d, mib)) for d, mib in sorted(buffers.items())]
                    print(format_table(rows[-len(buffers) :]).splitlines()[-1], flush=True)
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
