"""The decisive rule's thresholds, measured: equivalent runtimes against wrong ones.

    python3 -m bench.verify_rule --out DIR [--binary LLAMA_SERVER] [--seeds 101,102,103]
        [--shape tiny|small-f16|llama43] [--ngl N] [--only NAME ...]

For each seed a random llama of that shape is written (F16, and the same weights in Q4_0), a
reference is recorded with verify on the base runtime, and verify checks it against:

* equivalent runtimes (numerically the same model, other kernels or schedules): the same
  server restarted, a prompt processed in batches of 8 (``-ub 8 -b 8``), one thread, flash
  attention on, an F32 KV cache, and on the CPU build every other CPU variant this CPU runs;
  with ``--ngl`` on a GPU build also every layer on the GPU and none;
* wrong runtimes the rule must reject: another seed's weights, the same weights in Q4_0 (12
  bits per weight below F16), a broken chat template (``--chat-template chatml``), a server
  default that changes the answers (``--repeat-penalty 1.5``) and a runtime that answers
  garbage (every RMS norm's epsilon overridden to 1000).

For every check it prints each case's common greedy prefix, where it diverged, how decisive
the reference was there (top-1 over top-2, nats), whether the token was one the reference
ranked, and the largest logprob difference; then the largest margin at which an equivalent
runtime diverged and the smallest at which a wrong one did: the decisive margin must lie
between them. Everything lands in ``DIR/verify-rule.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import gguf

from components.payloads import verify
from components.payloads.tune_local import set_flag
from tests.support import llama_build
from tests.support.llama_server import free_port, run_llama_server
from tests.support.tiny_gguf import DEFAULT_SPEC, LLAMA43_SPEC, write_tiny_model_seeded
from tests.support.verify_models import SMALL_F16, with_random_model_tolerance

SHAPES = {"tiny": DEFAULT_SPEC, "small-f16": SMALL_F16, "llama43": LLAMA43_SPEC}
WRONG_SEED_OFFSET = 1000
NORM_EPS_KEY = "llama.attention.layer_norm_rms_epsilon"
"""Overridden to 1000, every RMS norm flattens the activations: a runtime answering garbage."""


def base_argv(model: Path, ngl: str | None) -> list[str]:
    """One slot, the reference's settings (the rendered stack's shape: -np 1, a 4k context)."""
    argv = ["-m", str(model), "--port", str(free_port()), "-c", "4096", "-np", "1"]
    argv += ["--threads", str(min(os.cpu_count() or 1, 4))]
    return argv + (["-ngl", ngl] if ngl is not None else [])


def equivalents(argv: list[str], ngl: str | None) -> list[tuple[str, list[str], str | None]]:
    """(name, argv, CPU variant) of runtimes numerically equivalent to the base one."""
    out: list[tuple[str, list[str], str | None]] = [
        ("restart", argv, None),
        ("ubatch-8", set_flag(set_flag(argv, "-ub", "8"), "-b", "8"), None),
        ("threads-1", set_flag(argv, "--threads", "1"), None),
        ("flash-attn", set_flag(argv, "-fa", "on"), None),
        ("kv-f32", set_flag(set_flag(argv, "-ctk", "f32"), "-ctv", "f32"), None),
    ]
    if ngl is None:
        default = llama_build.default_variant()
        out += [(f"cpu-{v}", argv, v) for v in llama_build.supported_variants() if v != default]
    else:
        out += [("ngl-99", set_flag(argv, "-ngl", "99"), None)]
        out += [("ngl-0", set_flag(argv, "-ngl", "0"), None)]
    return out


def wrong(argv: list[str], other: Path, quant: Path) -> list[tuple[str, list[str], str | None]]:
    """(name, argv, CPU variant) of runtimes the rule must reject."""
    return [
        ("other-weights", set_flag(argv, "-m", str(other)), None),
        ("q4_0", set_flag(argv, "-m", str(quant)), None),
        ("chatml-template", set_flag(argv, "--chat-template", "chatml"), None),
        ("repeat-penalty", set_flag(argv, "--repeat-penalty", "1.5"), None),
        ("garbage-norm", set_flag(argv, "--override-kv", f"{NORM_EPS_KEY}=float:1000"), None),
    ]


def check(
    binary: str | None, argv: list[str], variant: str | None, doc: dict[str, Any], log: Path
) -> dict[str, Any]:
    """Verify `doc` against one runtime: each case's comparison and the verdict."""
    argv = set_flag(argv, "--port", str(free_port()))
    with run_llama_server(
        argv, binary=binary, cpu_variant=variant, timeout=600, log_path=log
    ) as url:
        results = verify.verify(url, doc)
    tolerance = verify.tolerance_of(doc)
    cases = []
    for result, case in zip(results, doc["cases"], strict=True):
        ref = [verify.TokenStep.from_json(s) for s in case.get("reference", {}).get("steps", [])]
        cases.append(
            {
                "case": result.case_id,
                "agreement": result.agreement,
                "tie": None if result.tie is None else result.tie.position,
                "maxLogprobDelta": result.max_logprob_delta,
                "problems": result.problems,
                "divergence": divergence(ref, result),
            }
        )
    evidence = verify.evidence_problem(results, tolerance)
    return {
        "passed": all(r.ok for r in results) and evidence is None,
        "evidence": evidence,
        "cases": cases,
    }


def divergence(ref: list[verify.TokenStep], result: verify.CaseResult) -> dict[str, Any] | None:
    """Where the case left the reference and how decisive the reference was there."""
    if result.agreement is None or result.agreement[0] >= result.agreement[1]:
        return None
    position = result.agreement[0]
    return {"position": position, "margin": verify.margin(ref[position])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--binary", help="llama-server (default: the project's CPU build)")
    p.add_argument("--seeds", default="101,102,103")
    p.add_argument("--shape", choices=sorted(SHAPES), default="small-f16")
    p.add_argument("--ngl", help="offload this many layers (a GPU build; default: none)")
    p.add_argument("--only", nargs="*", help="run only these checks, by name")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = SHAPES[args.shape]
    quant_spec = dataclasses.replace(spec, weight_type=gguf.GGMLQuantizationType.Q4_0)
    summary: dict[str, Any] = {"shape": args.shape, "ngl": args.ngl, "seeds": {}}
    for seed in (int(s) for s in args.seeds.split(",")):
        folder = Path(tempfile.mkdtemp(prefix=f"verify-rule-{seed}-"))
        model = write_tiny_model_seeded(folder / "f16", "m", 1, spec, seed=seed)[0]
        quant = write_tiny_model_seeded(folder / "q4", "m", 1, quant_spec, seed=seed)[0]
        other = write_tiny_model_seeded(
            folder / "other", "m", 1, spec, seed=seed + WRONG_SEED_OFFSET
        )[0]
        argv = base_argv(model, args.ngl)
        log = args.out / f"{seed}-record.log"
        with run_llama_server(argv, binary=args.binary, timeout=600, log_path=log) as url:
            doc = verify.record(url, with_random_model_tolerance(verify.new_expectations()))
        (args.out / f"{seed}-expect.json").write_text(json.dumps(doc, indent=1))
        runs: dict[str, Any] = {}
        for kind, checks in (
            ("equivalent", equivalents(argv, args.ngl)),
            ("wrong", wrong(argv, other, quant)),
        ):
            for name, run_argv, variant in checks:
                if args.only and name not in args.only:
                    continue
                outcome = check(
                    args.binary, run_argv, variant, doc, args.out / f"{seed}-{name}.log"
                )
                runs[name] = {"kind": kind, **outcome}
                print(report_line(seed, name, kind, outcome), flush=True)
        summary["seeds"][str(seed)] = runs
    summary["bounds"] = bounds(summary)
    (args.out / "verify-rule.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["bounds"], indent=1))
    return 0


def report_line(seed: int, name: str, kind: str, outcome: dict[str, Any]) -> str:
    """One line per check: the verdict and each case's prefix, divergence margin and delta."""
    parts = []
    for case in outcome["cases"]:
        agree = case["agreement"]
        cell = "-" if agree is None else f"{agree[0]}/{agree[1]}"
        div = case["divergence"]
        if div is not None:
            m = div["margin"]
            cell += f"@{'?' if m is None else f'{m:.3f}'}"
        if case["maxLogprobDelta"] is not None:
            cell += f" d{case['maxLogprobDelta']:.3f}"
        parts.append(cell)
    verdict = "PASS" if outcome["passed"] else "FAIL"
    return f"seed {seed} {kind:10} {name:16} {verdict}  " + "  ".join(parts)


def bounds(summary: dict[str, Any]) -> dict[str, Any]:
    """The largest divergence margin and logprob delta of equivalent runtimes, the smallest
    divergence margin of wrong ones, and which checks went the wrong way."""
    eq_margin, eq_delta, wrong_margin = 0.0, 0.0, None
    misjudged = []
    for seed, runs in summary["seeds"].items():
        for name, run in runs.items():
            margins = [
                c["divergence"]["margin"]
                for c in run["cases"]
                if c["divergence"] and c["divergence"]["margin"] is not None
            ]
            if run["kind"] == "equivalent":
                eq_margin = max([eq_margin, *margins])
                deltas = [c["maxLogprobDelta"] or 0.0 for c in run["cases"]]
                eq_delta = max([eq_delta, *deltas])
                if not run["passed"]:
                    misjudged.append(f"{seed}/{name} rejected")
            else:
                if margins:
                    low = max(margins)
                    wrong_margin = low if wrong_margin is None else min(wrong_margin, low)
                if run["passed"]:
                    misjudged.append(f"{seed}/{name} accepted")
    return {
        "equivalentMaxDivergenceMargin": eq_margin,
        "equivalentMaxLogprobDelta": eq_delta,
        "wrongLeastDecisiveMargin": wrong_margin,
        "misjudged": misjudged,
    }


if __name__ == "__main__":
    sys.exit(main())
