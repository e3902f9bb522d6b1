"""Serving figures of an OpenAI-compatible endpoint, beside seed 002's MI300X figures.

    python3 -m bench.serve http://HOST:8080 [--api-key K] [--out bench.json] [...]
    python3 -m bench.serve --tiny [--out bench.json]

The first form is ``llm-infra bench`` (every option of ``infra/cli/bench.py``) and runs on a
plain Python: the benchmark (``components/payloads/bench.py``) and the verify payload it uses
are standard-library modules, and neither the command nor the packages import pulumi. ``--tiny``
starts the local llama-server b11434 (the CPU build of scripts/build-llama) on the tiny test model
with 4 slots and runs a small configuration: a smoke run of the tool, not a model figure.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from infra.cli.bench import main as bench_main

TINY_ARGS = [
    "--decode-requests", "5", "--decode-tokens", "128", "--prefill-requests", "3",
    "--prefill-words", "250", "--concurrency", "1,4,8", "--concurrent-tokens", "128",
    "--requests-per-stream", "2",
]  # fmt: skip


def main(argv: list[str]) -> int:
    """Run against a URL, or against a local tiny llama-server with ``--tiny``."""
    if "--tiny" not in argv:
        return bench_main(argv)
    from tests.support.llama_server import run_llama_server, tiny_server_argv
    from tests.support.tiny_gguf import write_tiny_split_model

    rest = [a for a in argv if a != "--tiny"]
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_split_model(Path(tmp), "tiny", 3)[0]
        with run_llama_server(tiny_server_argv(model, "--metrics")) as url:
            return bench_main([url, *TINY_ARGS, *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
