"""Real llama-server b11434 load logs with and without op-level degradation, on the CPU build.

    .venv/bin/python -m bench.gate_ops_logs --out tests/fixtures/gpu_gate/ops

An rpc-server on loopback plays the GPU (``tests.support.gate_server.run_rpc_gated_llama_server``:
``-ngl all`` puts every layer on ``RPC0[127.0.0.1:PORT]``), and each case adds the flags that
make b11434 print its real degradation lines (``FUSED_OPS_OFF``: Flash Attention and the fused
DeepSeek V4 HC ops "not supported, set to disabled"; ``-sm tensor -bs``: backend sampling on
the CPU). Each log is what the pod's wrapper keeps (``-lv 4 --log-file``, up to ``listening
on``), written as ``OUT/<case>.load.log`` (gzipped at ``-lv 5``; the build's and the temporary
model's folders rewritten as ``/opt/llama`` and ``/models``), with the gate's verdict printed
beside it (device prefix ``RPC``). The fixtures' README says which case made which file.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
from pathlib import Path

from components.payloads import gpu_gate
from tests.support.gate_server import FUSED_OPS_OFF, run_rpc_gated_llama_server
from tests.support.llama_build import build_root, deepseek4_model
from tests.support.tiny_gguf import write_tiny_split_model

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "deepseek4-rpc-healthy": ("deepseek4", ("-fa", "auto")),
    "deepseek4-rpc-flash-attn-off": ("deepseek4", ("-fa", "off")),
    "deepseek4-rpc-healthy-lv5": ("deepseek4", ("-fa", "auto", "-lv", "5")),
    "deepseek4-rpc-fused-ops-disabled": ("deepseek4", FUSED_OPS_OFF),
    "llama-rpc-flash-attn-disabled": ("llama", FUSED_OPS_OFF),
    "deepseek4-rpc-split-tensor-backend-sampling": (
        "deepseek4",
        ("-sm", "tensor", "-fa", "on", "-bs"),
    ),
}


def capture(out: Path) -> None:
    """Run every case and keep its load log."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "deepseek4": deepseek4_model(),
            "llama": write_tiny_split_model(Path(tmp), "tiny", 3)[0],
        }
        for name, (model, flags) in CASES.items():
            work = Path(tmp) / name
            work.mkdir()
            with run_rpc_gated_llama_server(models[model], work, *flags) as (_, log):
                text = log.read_text()
            text = text.replace(str(build_root()), "/opt/llama").replace(tmp, "/models")
            if name.endswith("-lv5"):
                (out / f"{name}.load.log.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
            else:
                (out / f"{name}.load.log").write_text(text)
            result = gpu_gate.check_log(text, None, device_prefix="RPC")
            print(f"{name}: {'PASS' if result.ok else 'FAIL'}, {len(result.problems)} problems")
            for problem in result.problems:
                print(f"  - {problem[:160]}")


def main() -> None:
    """Parse the arguments and capture."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the load logs")
    capture(parser.parse_args().out)


if __name__ == "__main__":
    main()
