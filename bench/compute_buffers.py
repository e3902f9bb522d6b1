"""llama-server's compute buffers across model shapes, beside the planner's estimate.

    python3 -m bench.compute_buffers [--shapes 1024:1024,1024:4096] [--ctx 4096,65536]
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
import tempfile
from pathlib import Path

# The runs and the table; the planner's figure only where it imports (not on a GPU machine's
# plain Python).
from tests.support.compute_buffers import (
    Key,
    compute_buffers,
    format_table,
    from_logs,
    log_name,
    row,
    write_model,
)


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


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
