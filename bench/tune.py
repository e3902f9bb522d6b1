"""The bake-off table for any set of candidates, on a plain Python (no pulumi): the GPU machine.

    python3 -m bench.tune --argv ARGV.json --candidates CANDIDATES.json --model GGUF --out DIR
    python3 -m bench.tune --argv ARGV.json --gpu /opt/llama/bin/llama-server --out DIR

``ARGV.json`` is the llama-server ``args`` of the rendered Deployment (``llm-infra render
strix-halo``, or ``llm-infra tune``'s own); ``CANDIDATES.json`` is the ``--local`` file of
``llm-infra tune`` (docs/tune.md). Verify's expectations are ``--expect``, or recorded first
against the current candidate. ``--gpu BINARY`` makes the GPU set: the stack as rendered
(``-ngl 40``, current), every layer on the GPU (``-ngl 99``), a really slower one (``-ngl 20``)
and the same build with the Vulkan driver hidden (the CPU fallback the gate rejects), on the
43-layer random llama of ``--seed`` (in a temporary folder), plus the wrong runtimes verify must
reject: another seed's weights, the same weights in Q4_0 and a wrong chat template. Before the
candidates are judged the current one checks itself (the record's ``selfCheck``). Prints the
table and writes ``DIR/tune.json`` (the record) and each candidate's logs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from components.payloads import tune_figures, tune_local, verify
from tests.support.llama_server import free_port
from tests.support.verify_models import with_random_model_tolerance

DRAFT_TOKENS = 4
"""Tokens drafted per step (the published DSpark setup for this model on this box: 4)."""
VULKAN: dict[str, Any] = {
    "name": "vulkan",
    "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
    "backend": "vulkan",
    "capabilities": [],
    "digest": None,
}


def gpu_candidates(
    binary: str, wrong: dict[str, Path], drafts: dict[str, Path]
) -> list[tune_local.LocalCandidate]:
    """The stack as rendered against more and fewer offloaded layers, a larger ubatch, the
    driver hidden, the planted wrong runtimes (`wrong`: name to the model file it loads) that
    verify must reject whatever their speed, and every layer on the GPU with each draft of
    `drafts` for speculative decoding (greedy: verify must accept them)."""
    command = [binary]
    return [
        tune_local.LocalCandidate("vulkan-ngl-40", VULKAN, command, current=True),
        tune_local.LocalCandidate("vulkan-ngl-99", VULKAN, command, set_args={"-ngl": "99"}),
        tune_local.LocalCandidate(
            "vulkan-ngl-99-ub-1024",
            VULKAN,
            command,
            set_args={"-ngl": "99", "-ub": "1024", "-b": "1024"},
        ),
        tune_local.LocalCandidate("vulkan-ngl-20", VULKAN, command, set_args={"-ngl": "20"}),
        tune_local.LocalCandidate(
            "driver-hidden", VULKAN, command, env={"VK_DRIVER_FILES": "/nonexistent.json"}
        ),
        *(
            tune_local.LocalCandidate(name, VULKAN, command, set_args={"-m": str(model)})
            for name, model in wrong.items()
        ),
        tune_local.LocalCandidate(
            "wrong-template", VULKAN, command, set_args={"--chat-template": "chatml"}
        ),
        *(
            tune_local.LocalCandidate(
                f"ngl-99-{name}", VULKAN, command, set_args={"-ngl": "99", **speculation(draft)}
            )
            for name, draft in drafts.items()
        ),
    ]


def speculation(draft: Path, tokens: int = DRAFT_TOKENS) -> dict[str, str]:
    """llama-server's flags for greedy speculative decoding with `draft` (every layer of it on
    the GPU): what `server.speculative` renders for `method: draft-simple`."""
    return {
        "--spec-type": "draft-simple",
        "--spec-draft-model": str(draft),
        "--spec-draft-n-max": str(tokens),
        "--spec-draft-ngl": "99",
    }


def gpu_models(seed: int) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    """The 43-layer random llama of `seed` (F16), the wrong models planted beside it (another
    seed's weights, and the same weights in Q4_0: 12 bits a weight below F16), and its drafts:
    its own first 4 layers with its embeddings and output (`spec-draft-4`), and the whole model
    as its own draft (`spec-self`: every proposal accepted, the overhead alone)."""
    import gguf

    from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model_seeded

    folder = Path(tempfile.mkdtemp())
    q4 = dataclasses.replace(LLAMA43_SPEC, weight_type=gguf.GGMLQuantizationType.Q4_0)
    model = write_tiny_model_seeded(folder / "f16", "llama43", 1, LLAMA43_SPEC, seed=seed)[0]
    wrong = {
        "wrong-weights": write_tiny_model_seeded(
            folder / "other", "llama43", 1, LLAMA43_SPEC, seed=seed + 1000
        )[0],
        "wrong-quant-q4-0": write_tiny_model_seeded(folder / "q4", "llama43", 1, q4, seed=seed)[0],
    }
    drafts = {
        "spec-draft-4": write_tiny_model_seeded(
            folder / "draft", "draft4", 1, LLAMA43_SPEC, seed=seed, keep_layers=4
        )[0],
        "spec-self": model,
    }
    return model, wrong, drafts


def write_record(
    out: Path,
    results: list[tune_figures.CandidateResult],
    expectations: dict[str, Any],
    *,
    runs: int,
) -> tuple[list[int], tune_figures.CandidateResult | None]:
    """Decide among `results` and write `out/tune.json`: (the depths measured, the winner)."""
    measured = sorted({d.depth for r in results for d in r.depths})
    winner = tune_figures.decide(results, measured)
    record = tune_figures.tune_record(
        "strix-halo",
        None,
        results,
        winner,
        depths=measured,
        runs=runs,
        where="local",
        correctness=verify.rule_line(verify.tolerance_of(expectations)),
    )
    (out / "tune.json").write_text(json.dumps(record, indent=2) + "\n")
    return measured, winner


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--argv", type=Path, required=True, help="the rendered llama-server args")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--candidates", type=Path, help="llm-infra tune's --local file")
    which.add_argument("--gpu", metavar="BINARY", help="the GPU set on this llama-server")
    p.add_argument("--model", type=Path, help="the model (--candidates only)")
    p.add_argument(
        "--seed", type=int, default=20240731,
        help="--gpu: the seed of the 43-layer random llama (default: the gate fixtures')",
    )  # fmt: skip
    p.add_argument("--expect", type=Path, help="verify expectations (default: recorded first)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--depths", default="0,32768,65536")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--prefill-tokens", type=int, default=512)
    p.add_argument("--decode-tokens", type=int, default=64)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stack_args = json.loads(args.argv.read_text())
    if args.gpu:
        args.model, wrong, drafts = gpu_models(args.seed)
        candidates = gpu_candidates(args.gpu, wrong, drafts)
    else:
        candidates = tune_local.load_candidates(args.candidates)
    if args.model is None:
        p.error("--model is required with --candidates")
    if args.expect:
        expectations = verify.load_expectations(args.expect)
    else:
        current = next((c for c in candidates if c.current), candidates[0])
        # The --gpu models are random-weight ones: flat, so checked by their own thresholds.
        into = (
            with_random_model_tolerance(verify.new_expectations(), gpu=True) if args.gpu else None
        )
        expectations = tune_local.record_expectations(
            current, stack_args, model=args.model, port=free_port(), log=args.out / "record.log",
            into=into,
        )  # fmt: skip
        (args.out / "expect.json").write_text(json.dumps(expectations, indent=1))
    results: list[tune_figures.CandidateResult] = []
    for candidate in candidates:
        result = tune_local.run_candidate(
            candidate, stack_args, model=args.model, port=free_port(), workdir=args.out,
            expectations=expectations, depths=[int(d) for d in args.depths.split(",")],
            runs=args.runs, prefill_tokens=args.prefill_tokens, decode_tokens=args.decode_tokens,
        )  # fmt: skip
        print(f"{candidate.name}: {result.rejection or 'measured'}", file=sys.stderr)
        results.append(result)
        # The record so far, rewritten after each candidate: a run cut short keeps what it measured.
        measured, winner = write_record(args.out, results, expectations, runs=args.runs)
    if not results:
        p.error("no candidates")
    print(tune_figures.format_table(results, measured))
    if winner is None:
        print("no candidate passed: the record names no winner")
        return 1
    print(f"winner: {winner.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
