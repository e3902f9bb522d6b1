"""Serving figures of an OpenAI-compatible endpoint, beside seed 002's MI300X figures.

    python3 bench/serve.py http://HOST:8080 [--api-key K] [--out bench.json] [...]
    python3 bench/serve.py --tiny [--out bench.json]

The first form is ``llm-infra bench`` (every option of ``infra/cli/bench.py``) and runs on a
plain Python: the benchmark and ``components/payloads/verify.py`` are standard-library files,
loaded here by path so that no package ``__init__`` (which imports pulumi) runs. ``--tiny``
starts the local llama-server b11434 (the CPU build of scripts/build-llama) on the tiny test model
with 4 slots and runs a small configuration: a smoke run of the tool, not a model figure.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.modules import load_file  # noqa: E402

TINY_ARGS = [
    "--decode-requests", "5", "--decode-tokens", "128", "--prefill-requests", "3",
    "--prefill-words", "250", "--concurrency", "1,4,8", "--concurrent-tokens", "128",
    "--requests-per-stream", "2",
]  # fmt: skip


def load_bench() -> ModuleType:
    """``infra/cli/bench.py`` and the verify payload it imports, by path (no pulumi needed)."""
    payloads = ROOT / "components" / "payloads"
    load_file("components.payloads.verify", payloads / "verify.py")
    # The gate too, for the scripts beside this one (bench/gpu_run.py, tests/support).
    load_file("components.payloads.gpu_gate", payloads / "gpu_gate.py")
    return load_file("infra.cli.bench", ROOT / "infra" / "cli" / "bench.py")


def main(argv: list[str]) -> int:
    """Run against a URL, or against a local tiny llama-server with ``--tiny``."""
    serve_bench = load_bench()
    if "--tiny" not in argv:
        return int(serve_bench.main(argv))
    from tests.support.llama_server import run_llama_server, tiny_server_argv
    from tests.support.tiny_gguf import write_tiny_split_model

    rest = [a for a in argv if a != "--tiny"]
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_split_model(Path(tmp), "tiny", 3)[0]
        with run_llama_server(tiny_server_argv(model, "--metrics")) as url:
            return int(serve_bench.main([url, *TINY_ARGS, *rest]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
