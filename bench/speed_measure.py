"""llama-server's own decode and prefill of the speed estimate's generated models, on a CPU
or through a GPU backend.

    python3 -m bench.speed_measure --server BIN/llama-server --cpu-lib LIB [--out FILE]
        [--depths 0,4096] [--threads 2]
    python3 -m bench.speed_measure --server BIN/llama-server --backend vulkan --device h100-sxm \
        --gpu-layers all,half --depths 0,16384 --threads 8 --out FILE

Standard library only (it runs where the GPU machines are, without the project's virtual
environment). Each shape of `bench.speed_shapes` is written, served by the llama-server given
(`--load-mode none`: no mmap; one slot, F16 KV cache, `--threads`; `GGML_BACKEND_PATH` =
`--cpu-lib`, the ggml CPU variant llama.cpp would pick on that CPU) and measured by
`components.payloads.tune_measure.measure_depth` at each depth (512 new prompt tokens, then 64
decoded, three runs). The record keeps the server's figures, the model's header summary and the
machine's CPU, so `bench.speed_estimate` compares the estimate without a server.

With `--backend vulkan` the build's own GPU backend serves each shape once per `--gpu-layers`
entry (`all`: every layer and the output; `half`: half the repeating layers, the rest on the
CPU; or a number), after one warm-up request (the first requests after a load compile the
GPU's pipelines). The record keeps each run's `-ngl`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.speed_shapes import SHAPES, shape_of, write_shape
from components.gguf_header import read_gguf_header, summarize
from components.payloads.tune_measure import measure_depth


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo states it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def gpu_layers(entry: str, n_layer: int) -> int:
    """`-ngl` of a `--gpu-layers` entry for a model of `n_layer` repeating layers."""
    if entry == "all":
        return n_layer + 1
    if entry == "half":
        return n_layer // 2
    return int(entry)


def measure_shape(
    name: str, depths: list[int], runs: int, server: str, cpu_lib: str | None, threads: int,
    ngl: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One shape's record: its header summary and the server's figures at each depth
    (`cpu_lib`: the CPU variant to load, None: the build's own; `ngl`: a `--gpu-layers`
    entry of a GPU run)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_shape(Path(tmp), name)
        with path.open("rb") as handle:
            summary = summarize([read_gguf_header(handle)])
        context = max(depths) + 512 * (runs + 1) + 64 + runs + 1024
        port = _free_port()
        argv = [
            server, "-m", str(path), "--port", str(port), "-c", str(context), "-np", "1",
            "--threads", str(threads), "--threads-batch", str(threads), "--load-mode", "none",
        ]  # fmt: skip
        layers = None if ngl is None else gpu_layers(ngl, shape_of(name).n_layer)
        argv += [] if layers is None else ["-ngl", str(layers)]
        log = Path(tmp) / "server.log"
        env = {**os.environ, **({"GGML_BACKEND_PATH": cpu_lib} if cpu_lib else {})}
        with log.open("wb") as out:
            process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    pass
                if process.poll() is not None:
                    raise RuntimeError(log.read_text(errors="replace")[-3000:])
                time.sleep(0.5)
            if layers is not None:
                # The warm-up (the GPU's pipelines compile), on a prompt no measured run
                # starts with: the slot keeps it, and a run on it would prefill one token.
                measure_depth(url, 0, runs=1, skip_windows=runs)
            figures = [measure_depth(url, depth, runs=runs).to_json() for depth in depths]
        finally:
            process.terminate()
            process.wait(timeout=30)
        record = {"shape": name, "summary": summary, "context": context, "figures": figures}
        return record if layers is None else {**record, "ngl": layers}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="the llama-server executable")
    p.add_argument("--cpu-lib", help="the ggml CPU variant library to load (a CPU run)")
    p.add_argument("--backend", choices=("cpu", "vulkan"), default="cpu")
    p.add_argument("--gpu-layers", default="all,half", help="a GPU run's -ngl entries")
    p.add_argument("--out", type=Path, default=Path("tests/fixtures/speed/cpu.json"))
    p.add_argument("--depths", default="0,4096")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--device", default="epyc-7003", help="the CPU's entry in infra.devices.DEVICES")
    a = p.parse_args(argv)
    if a.backend == "cpu" and not a.cpu_lib:
        p.error("--cpu-lib: required for a CPU run")
    depths = [int(d) for d in a.depths.split(",")]
    gpu = a.backend != "cpu"
    record: dict[str, Any] = {
        "cpu": cpu_name(),
        "device": a.device,
        "backend": a.backend,
        "cpu_lib": Path(a.cpu_lib).name if a.cpu_lib else None,
        "threads": a.threads,
        "cores_online": os.cpu_count(),
        "depths": depths,
        "models": [],
    }
    runs = [
        (n, g) for n in a.shapes.split(",") for g in (a.gpu_layers.split(",") if gpu else [None])
    ]
    for name, ngl in runs:
        shape = measure_shape(name, depths, a.runs, a.server, a.cpu_lib, a.threads, ngl)
        record["models"].append(shape)
        for fig in shape["figures"]:
            decode, prefill = fig["decodeTokSServer"], fig["prefillTokSServer"]
            print(name, shape.get("ngl", ""), fig["depth"], "decode", decode["median"],
                  "prefill", prefill["median"], fig["errors"], flush=True)  # fmt: skip
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
