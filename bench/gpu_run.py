"""The rendered strix-halo llama-server argv on a real GPU: the gate, verify and bench.

    python3 -m bench.gpu_run --binary /opt/llama/bin/llama-server --argv ARGV.json \\
        --model NAME=GGUF [--model ...] --out DIR

Runs on the GPU machine with a plain Python (no pulumi): ``ARGV.json`` is the llama-server
``args`` of the rendered Deployment (``llm-infra render strix-halo``; ``--argv-from-render``
reads them from a render's resources.json). For each model it starts llama-server exactly as
the pod does (the load-log wrapper of ``gate.server_command``, the rendered flags; only
``-m``, ``--port`` and ``--log-file`` changed), then:

* the gate: the Python check and the rendered startup probe's shell on the load log;
* verify: records a reference on the GPU, then checks a restarted GPU server (must pass) and
  each simulated fallback (``GGML_VK_VISIBLE_DEVICES=`` empty, ``VK_DRIVER_FILES`` pointing
  nowhere, ``-ngl 0``): the gate must fail with its cause, verify on the decode speed;
* bench: every figure beside the server's own timings (``measured / server-side``);
* the log growth under traffic with the wrapper (``bench/log_growth.py``).

Each load log, console log and report lands in DIR (the fixtures under tests/fixtures/ come
from such a run). Figures from a discrete NVIDIA GPU are for the tools, not for the NUCBox.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The payloads and the gate's shell import no pulumi: a plain Python runs this.
from components.llamacpp import gate as gate_shell
from components.payloads import bench, gpu_gate, verify
from components.payloads.bench_report import agreement, format_table
from tests.support import log_growth as growth
from tests.support.gate_server import run_gated_llama_server
from tests.support.llama_server import free_port


def replace_value(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with the value after ``flag`` replaced."""
    i = argv.index(flag)
    return [*argv[: i + 1], value, *argv[i + 2 :]]


def argv_from_render(resources: Path) -> list[str]:
    """The llama-server container args of a render's resources.json."""
    for resource in json.loads(resources.read_text()):
        if resource["type"] == "kubernetes:apps/v1:Deployment":
            for c in resource["inputs"]["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "llama-server":
                    return list(c["args"])
    raise SystemExit(f"no llama-server Deployment in {resources}")


@contextlib.contextmanager
def server(
    binary: str, rendered: list[str], model: Path, out: Path, tag: str,
    env: dict[str, str] | None = None, ngl: str | None = None,
) -> Iterator[tuple[str, Path, list[str]]]:  # fmt: skip
    """The rendered argv on ``model``, started as the pod starts it; (url, load log, argv)."""
    log = out / f"{tag}.load.log"
    argv = replace_value(rendered, "-m", str(model))
    argv = replace_value(argv, "--port", str(free_port()))
    argv = replace_value(argv, "--log-file", str(log))
    if ngl is not None:
        argv = replace_value(argv, "-ngl", ngl)
    with run_gated_llama_server(
        argv, out / f"{tag}.console.log", binary=binary, timeout=600, env=env
    ) as url:
        yield url, log, argv


def gate(url: str, log: Path, argv: list[str]) -> dict[str, Any]:
    """The Python gate and the rendered probe shell on one load log."""
    layers = int(argv[argv.index("-ngl") + 1])
    result = gpu_gate.check_log(log.read_text(errors="replace"), layers)
    probe = subprocess.run(
        gate_shell.probe_command(str(log), layers, health_url=url),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    print(result.summary())
    print(f"probe (rc {probe.returncode}): {probe.stdout.strip()}")
    return {"ok": result.ok, "problems": result.problems, "probe_rc": probe.returncode,
            "probe": probe.stdout.strip(), "seen": result.evidence.seen()}  # fmt: skip


def verify_run(url: str, doc: dict[str, Any]) -> dict[str, Any]:
    """verify's table and speed check against ``doc``; ok as verify.run would decide."""
    results = verify.verify(url, doc)
    print(verify.format_table(results))
    fraction = {**verify.DEFAULT_TOLERANCE, **doc.get("tolerance", {})}["min_decode_fraction"]
    problem, line = verify.recorded_speed_problem(results, doc, float(fraction))
    print(problem or line)
    return {"ok": all(r.ok for r in results) and problem is None,
            "cases_ok": sum(r.ok for r in results), "speed": problem or line}  # fmt: skip


def make_models(directory: Path, archs: str | None) -> dict[str, str]:
    """A 43-layer llama (44 offloadable: ``-ngl 40`` leaves 4 on the CPU, as on the NUCBox) and,
    with ``archs`` (llama.cpp's test-llama-archs), its tiny random deepseek4."""
    from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model

    llama43 = write_tiny_model(directory / "llama43", "llama43", 3, LLAMA43_SPEC)
    models = {"llama43": str(llama43[0])}
    if archs:
        out = directory / "archs"
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([archs, "-a", "deepseek4", "-s", "42", "-o", str(out)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        models = {"deepseek4": str(out / "deepseek4-moe.gguf"), **models}
    return models


def main(argv: list[str] | None = None) -> int:
    """Run everything; 0 when every expectation held."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--argv", type=Path, help="JSON list: the rendered llama-server args")
    p.add_argument("--argv-from-render", type=Path, help="a render's resources.json")
    p.add_argument("--model", action="append", default=[], help="NAME=GGUF")
    p.add_argument("--make-models", type=Path, help="write the test models into this folder")
    p.add_argument("--archs", help="test-llama-archs binary, for the deepseek4 model")
    p.add_argument("--only", help="comma-separated model names to run (default: all)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--bench-model", help="NAME of the model to bench (default: the last)")
    p.add_argument("--growth-requests", type=int, default=200)
    p.add_argument("--skip-bench", action="store_true", help="the gate and verify only")
    a = p.parse_args(argv)
    rendered = json.loads(a.argv.read_text()) if a.argv else argv_from_render(a.argv_from_render)
    a.out.mkdir(parents=True, exist_ok=True)
    print("rendered argv:", " ".join(rendered))
    subprocess.run([a.binary, "--list-devices"], check=False)
    models = dict(m.split("=", 1) for m in a.model)
    if a.make_models:
        models = {**make_models(a.make_models, a.archs), **models}
    if a.only:
        models = {k: v for k, v in models.items() if k in a.only.split(",")}
    summary: dict[str, Any] = {}
    failures: list[str] = []
    for name, path in models.items():
        model = Path(path)
        print(f"\n===== {name}: {model.name}, rendered argv on the GPU")
        with server(a.binary, rendered, model, a.out, f"{name}-gpu") as (url, log, args):
            g = gate(url, log, args)
            doc = verify.record(url, verify.new_expectations())
            (a.out / f"{name}.verify.json").write_text(json.dumps(doc, indent=2) + "\n")
            print(f"recorded decode: {doc['recorded']['decode_tps']:.1f} tok/s")
        summary[name] = {"gpu_gate": g}
        if not g["ok"] or g["probe_rc"] != 0:
            failures.append(f"{name}: the gate failed on the GPU")
        with server(a.binary, rendered, model, a.out, f"{name}-gpu-restart") as (url, _, _):
            summary[name]["verify_gpu"] = v = verify_run(url, doc)
        if not v["ok"]:
            failures.append(f"{name}: verify failed on a restarted GPU server")
        hidden = {**os.environ, "GGML_VK_VISIBLE_DEVICES": ""}
        fallbacks: dict[str, tuple[dict[str, str] | None, str | None]] = {
            "no-visible-devices": (hidden, None),
            "driver-hidden": ({**os.environ, "VK_DRIVER_FILES": "/nonexistent.json"}, None),
            "ngl-0": (None, "0"),
        }
        for tag, (env, ngl) in fallbacks.items():
            print(f"\n----- {name}: fallback {tag}")
            with server(a.binary, rendered, model, a.out, f"{name}-{tag}", env, ngl) as (
                url, log, args,
            ):  # fmt: skip
                fg = gate(url, log, args)
                fv = verify_run(url, doc)
            summary[name][tag] = {"gpu_gate": fg, "verify": fv}
            if fg["ok"] or fg["probe_rc"] == 0:
                failures.append(f"{name}/{tag}: the gate passed a fallback")
            if fv["ok"]:
                failures.append(f"{name}/{tag}: verify passed a fallback")
        # -lv 5: the memory fit's dry run logs a load of its own, with zero-size buffers.
        lv5 = replace_value(rendered, "-lv", "5")
        for tag, env in (("gpu-lv5", None), ("no-visible-devices-lv5", hidden)):
            print(f"\n----- {name}: {tag}")
            with server(a.binary, lv5, model, a.out, f"{name}-{tag}", env) as (url, log, args):
                summary[name][tag] = g5 = gate(url, log, args)
            if g5["ok"] != (env is None) or (g5["probe_rc"] == 0) != (env is None):
                failures.append(f"{name}/{tag}: the gate decided wrongly at -lv 5")
    if a.skip_bench:
        (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print("\nfailures:", failures or "none")
        return 1 if failures else 0
    name = a.bench_model or list(models)[-1]
    print(f"\n===== bench on {name} (rendered argv)")
    cfg = bench.BenchConfig(
        decode_requests=3, decode_tokens=256, prefill_requests=3, prefill_words=4000,
        concurrency=[1, 8, 64], concurrent_tokens=128, requests_per_stream=1,
    )  # fmt: skip
    with server(a.binary, rendered, Path(models[name]), a.out, f"{name}-bench") as (url, _, _):
        started = time.monotonic()
        report = bench.run_bench(url, cfg)
        print(format_table(report))
        print(f"bench took {time.monotonic() - started:.0f} s")
        (a.out / f"{name}.bench.json").write_text(report.to_json() + "\n")
    summary["bench"] = {"agreement": agreement(report), "errors": report.errors}
    print(f"\n===== log growth on {name} (-lv 4, -np 1, default --cache-ram, the wrapper)")
    rows = growth.measure(Path(models[name]), a.growth_requests, 50, binary=a.binary, ngl="40")
    print(growth.format_rows(rows))
    summary["log_growth"] = rows
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for fifo in a.out.glob(".*.fifo"):
        fifo.unlink()
    print("\nfailures:", failures or "none")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
