"""The real llama-server b11434 boots with the argv of the rendered Deployment.

Only `-m` is pointed at a tiny 3-shard GGUF written here (and `--threads` lowered to this
machine's cores, `--port` moved only if 8080 is taken); every other flag is exactly what
`llm-infra render strix-halo` puts in the Deployment. No skip when the llama.cpp build is missing:
the test fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import gguf
import yaml

from components.llamacpp.manifests import llama_server_args
from infra.config.feeds import fed
from infra.targets.kubernetes import server_args
from tests.conftest import MODEL_VOLUME, ROOT, stack_values, strix, unlocked_source
from tests.support.llama_server import free_port, get_json, replace_value, run_llama_server
from tests.support.render import render
from tests.support.tiny_gguf import shard_names, write_tiny_split_model


def rendered_container(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "render"
    result = render("strix-halo", out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    documents = yaml.safe_load_all((out / "manifests.yaml").read_text())
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    (container,) = [
        c
        for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["name"] == "llama-server"
    ]
    return dict(container)


def rendered_server_args(tmp_path: Path) -> list[str]:
    args: list[str] = rendered_container(tmp_path)["args"]
    return args


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
    log = tmp_path / "llama-server.log"
    argv = replace_value(argv, "--log-file", str(log))
    changed = {argv[i - 1] for i, (a, b) in enumerate(zip(argv, rendered, strict=True)) if a != b}
    assert changed <= {"-m", "--threads", "--port", "--log-file"}

    alias = rendered[rendered.index("--alias") + 1]
    with run_llama_server(argv, timeout=120.0, log_path=tmp_path / "stderr.log") as base_url:
        status, health = get_json(f"{base_url}/health")
        assert (status, health) == (200, {"status": "ok"})
        status, models = get_json(f"{base_url}/v1/models")
        assert status == 200
        assert models["data"][0]["id"] == alias == "deepseek-v4-flash-0731"
        # The weights of all three shards are counted: llama-server found shards 2 and 3
        # from the first shard's name alone, as it will on the PVC.
        n_params = sum(int(t.n_elements) for s in shards for t in gguf.GGUFReader(s).tensors)
        assert models["data"][0]["meta"]["n_params"] == n_params


def test_llama_server_stops_a_request_without_max_tokens_at_the_rendered_n_predict(
    tmp_path: Path,
) -> None:
    """`server.nPredict` as the stack file renders it: a request that sets no token limit (and
    ignores end-of-stream) stops after that many tokens."""
    values = stack_values("strix-halo")
    values["server"]["nPredict"] = 5
    stack = strix(values)
    args = server_args(stack, fed(stack), unlocked_source(stack), MODEL_VOLUME)  # type: ignore[arg-type]
    rendered = llama_server_args(args["flags"])
    prefix = Path(rendered[rendered.index("-m") + 1]).name.rsplit("-00001-of-", 1)[0]
    shards = write_tiny_split_model(tmp_path / "models", prefix, shards=3)
    argv = replace_value(rendered, "-m", str(shards[0]))
    argv = replace_value(argv, "--threads", "2")
    argv = replace_value(argv, "--port", str(free_port()))
    assert argv[argv.index("--n-predict") + 1] == "5"
    body = json.dumps({"prompt": "hello", "ignore_eos": True, "temperature": 0}).encode()
    with run_llama_server(argv, timeout=120.0, log_path=tmp_path / "stderr.log") as base_url:
        request = urllib.request.Request(
            f"{base_url}/completion", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
    assert (answer["tokens_predicted"], answer["stop_type"]) == (5, "limit")


def test_rendered_gpu_gate_fails_on_the_cpu_build(tmp_path: Path) -> None:
    """The startup probe as rendered, run against b11434's real load log on a GPU-less build."""
    container = rendered_container(tmp_path)
    rendered = container["args"]
    prefix = Path(rendered[rendered.index("-m") + 1]).name.rsplit("-00001-of-", 1)[0]
    shards = write_tiny_split_model(tmp_path / "models", prefix, shards=3)
    log = tmp_path / "llama-server.log"
    argv = replace_value(rendered, "-m", str(shards[0]))
    argv = replace_value(argv, "--threads", "2")
    argv = replace_value(argv, "--port", str(free_port()))
    argv = replace_value(argv, "--log-file", str(log))
    command = container["startupProbe"]["exec"]["command"]
    script = command[2].replace(rendered[rendered.index("--log-file") + 1], str(log))
    port = argv[argv.index("--port") + 1]
    script = script.replace(f"http://127.0.0.1:{rendered[rendered.index('--port') + 1]}",
                            f"http://127.0.0.1:{port}")  # fmt: skip
    with run_llama_server(argv, timeout=120.0, log_path=tmp_path / "stderr.log"):
        probe = subprocess.run([*command[:2], script], capture_output=True, text=True, check=False)
    assert probe.returncode == 1, probe.stdout
    assert probe.stdout.startswith("gpu-gate: ")
    assert "PASS" not in probe.stdout
