"""A failed model upgrade leaves a model that a real llama-server b11434 still serves."""

from __future__ import annotations

from pathlib import Path

from tests.support.llama_server import get_json, run_llama_server, tiny_server_argv
from tests.support.upgrade import OLD, FailedUpgrade


def test_a_failed_upgrade_leaves_a_model_llama_server_still_serves(
    a_failed_upgrade: FailedUpgrade, tmp_path: Path
) -> None:
    first = a_failed_upgrade.upgrade.dest / OLD[0].rsplit("/", 1)[-1]
    argv = tiny_server_argv(first, "--alias", "old-model", parallel=1)
    with run_llama_server(argv, timeout=60.0, log_path=tmp_path / "llama-server.log") as url:
        assert get_json(f"{url}/health") == (200, {"status": "ok"})
        status, models = get_json(f"{url}/v1/models")
    assert status == 200 and models["data"][0]["id"] == "old-model"
