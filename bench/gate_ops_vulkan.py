"""Real llama-server b11434 Vulkan logs of op-level degradation, on the GPU machine.

    python3 -m bench.gate_ops_vulkan --binary /opt/llama/bin/llama-server --argv ARGV.json --out DIR

The rendered strix-halo argv (only ``-m``, ``--port`` and ``--log-file`` changed) on the 43-layer
random llama, started as the pod starts it (``bench/gpu_run.py``'s ``server``), once per case:

* ``vulkan-disabled-env``: ``GGML_DISABLE_VULKAN=1`` (the backend is never registered);
* ``vulkan-no-devices``: ``VK_DRIVER_FILES`` pointing nowhere (the loader finds no driver);
* ``backend-sampling``: ``-bs``, then one request with a grammar and one with a sampler that has no
  backend implementation (``typical_p``): the lines llama-server logs per request.

Each case keeps ``DIR/<case>.load.log`` (what the gate reads) and ``DIR/<case>.console.log`` (the
container log) and prints the gate's verdict and every degradation line it found, in either.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import urllib.request
from pathlib import Path

from bench.gpu_run import server
from components.payloads import gate_ops, gpu_gate

CASES: dict[str, tuple[dict[str, str], tuple[dict[str, object], ...], tuple[str, ...]]] = {
    "vulkan-disabled-env": ({"GGML_DISABLE_VULKAN": "1"}, (), ()),
    "vulkan-no-devices": ({"VK_DRIVER_FILES": "/nonexistent.json"}, (), ()),
    "backend-sampling": (
        {},
        (
            {"prompt": "a", "n_predict": 2, "grammar": 'root ::= "a" "b"'},
            {"prompt": "a", "n_predict": 2, "typical_p": 0.5, "temperature": 1.0},
        ),
        ("-bs",),
    ),
}


def post(url: str, body: dict[str, object]) -> str:
    """One /completion request; the response's text (or the error) for the report."""
    request = urllib.request.Request(
        f"{url}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return str(json.load(response).get("content"))
    except OSError as e:
        return f"error: {e}"


def main() -> int:
    """Run every case; print what the gate and the degradation table make of each."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--argv", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model

    model = write_tiny_model(Path(tempfile.mkdtemp()), "llama43", 1, LLAMA43_SPEC)[0]
    rendered = json.loads(args.argv.read_text())
    for case, (env, requests, extra) in CASES.items():
        with server(
            args.binary, [*rendered, *extra], model, args.out, case, env={**os.environ, **env}
        ) as (url, log, _):
            for body in requests:
                print(f"{case}: {json.dumps(body)} -> {post(url, body)!r}")
        text = log.read_text(errors="replace")
        console = (args.out / f"{case}.console.log").read_text(errors="replace")
        result = gpu_gate.check_log(text, 40)
        print(f"{case}: gate {'PASS' if result.ok else 'FAIL'}")
        for problem in result.problems:
            print(f"  - {problem[:200]}")
        for line in (text + console).splitlines():
            if any(d.matches(line) for d in gate_ops.DEGRADATIONS):
                print(f"  degradation: {line}")
    model.unlink()  # ~600 MiB: not a result
    return 0


if __name__ == "__main__":
    sys.exit(main())
