"""The bake-off on a real GPU: the rendered strix-halo argv, the Vulkan build, four candidates.

    python3 bench/tune_gpu.py --binary /opt/llama/bin/llama-server --argv ARGV.json --out DIR

Runs on the GPU machine with a plain Python (no pulumi): ``ARGV.json`` is the llama-server
``args`` of the rendered Deployment (``llm-infra render strix-halo``). The model is the
43-layer random llama of the gate's fixtures (``tests/support/tiny_gguf.LLAMA43_SPEC``), written
to DIR. The candidates: the stack as rendered (``-ngl 40``, current), every layer on the GPU
(``-ngl 99``), a really slower one (``-ngl 20``), and the same build with the Vulkan driver
hidden (``VK_DRIVER_FILES`` pointing nowhere: the CPU fallback the gate must reject). Verify's
expectations are recorded first against the current candidate. Prints the table and writes
``DIR/tune.json`` (the record) and each candidate's logs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.payloads import tune_figures, tune_local, verify  # noqa: E402
from tests.support.llama_server import free_port  # noqa: E402
from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model  # noqa: E402

VULKAN = {
    "name": "vulkan",
    "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
    "backend": "vulkan",
    "capabilities": [],
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--argv", type=Path, required=True, help="the rendered llama-server args")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--depths", default="0,32768,65536")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stack_args = json.loads(args.argv.read_text())
    model = write_tiny_model(args.out / "model", "llama43", 1, LLAMA43_SPEC)[0]
    command = [args.binary]
    candidates = [
        tune_local.LocalCandidate("vulkan-ngl-40", VULKAN, command, current=True),
        tune_local.LocalCandidate("vulkan-ngl-99", VULKAN, command, set_args={"-ngl": "99"}),
        tune_local.LocalCandidate("vulkan-ngl-20", VULKAN, command, set_args={"-ngl": "20"}),
        tune_local.LocalCandidate(
            "driver-hidden", VULKAN, command, env={"VK_DRIVER_FILES": "/nonexistent.json"}
        ),
    ]
    port = free_port()
    argv = tune_local.candidate_argv(
        stack_args, candidates[0], model=model, port=port, log=args.out / "record.log"
    )
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        if not tune_local.wait_loaded(process, url, 600.0):
            print("the recording server did not load", file=sys.stderr)
            return 1
        expectations = verify.record(url, verify.new_expectations())
    finally:
        tune_local.stop(process)
    (args.out / "expect.json").write_text(json.dumps(expectations, indent=1))
    depths = [int(d) for d in args.depths.split(",")]
    results = []
    for candidate in candidates:
        result = tune_local.run_candidate(
            candidate, stack_args, model=model, port=free_port(), workdir=args.out,
            expectations=expectations, depths=depths, runs=args.runs,
        )  # fmt: skip
        print(f"{candidate.name}: {result.rejection or 'measured'}", file=sys.stderr)
        results.append(result)
    measured = sorted({d.depth for r in results for d in r.depths})
    winner = tune_figures.decide(results, measured)
    record = tune_figures.tune_record(
        "strix-halo", None, results, winner, depths=measured, runs=args.runs, where="local"
    )
    (args.out / "tune.json").write_text(json.dumps(record, indent=2) + "\n")
    print(tune_figures.format_table(results, measured))
    print(f"winner: {winner.name if winner else None}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
