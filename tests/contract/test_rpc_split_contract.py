"""A split model on loopback: a real llama-server b11434 head and two real rpc-server workers.

Both binaries come from the project's one b11434 build (`scripts/build-llama`, with GGML_RPC,
cached); the model is llama.cpp's tiny deepseek4 (written by the same script). The stack is
strix-halo-pair-split with two workers and a head without a GPU of its own (this machine has
none), rendered by `llm-infra render`; the head runs exactly the rendered argv, with only what
names this machine replaced: the model path, the workers' addresses, the port and bind address,
the load log's path, the threads.

It checks that the head serves completions, that its load log shows the layers on both RPC
devices (the GPU gate, run on that log, passes), and that the plan's weights and KV cache per
device match the buffers llama-server logs per device within 5%. Run with `-s` for the table.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.gguf_header import read_gguf_header, summarize
from components.payloads.fetcher import LOCK_VERSION, ModelFile
from components.payloads.gpu_gate import check_log
from infra.config import KubernetesStack, lock_path_for, parse_stack
from infra.lock import ModelLock, model_source
from infra.lock import write_lock as write_lock_file
from infra.plan.report import MIB
from infra.targets.registry import stack_plan
from tests.conftest import ROOT, stack_values
from tests.support.cli import run_cli
from tests.support.llama_server import free_port, run_llama_server
from tests.support.rpc_server import rpc_build, run_rpc_server

TOLERANCE = 0.05
TINY_REPO = "ggml-org/test-llama-archs"
WORKERS = ("rpc-a", "rpc-b")

_MODEL_BUFFER = re.compile(r"load_tensors: +RPC\d+\[([^\]]+)\] model buffer size = +([0-9.]+) MiB")
_KV_BUFFER = re.compile(r"llama_kv_cache: +RPC\d+\[([^\]]+)\] KV buffer size = +([0-9.]+) MiB")
_STATE_BUFFER = re.compile(
    r"llama_dsv4_comp_state: +RPC\d+\[([^\]]+)\] DSV4 \w+ state buffer size = +([0-9.]+) MiB"
)


def split_stack_values(model: Path) -> dict[str, Any]:
    """strix-halo-pair-split for the tiny model: two workers, a head with no GPU of its own."""
    values = copy.deepcopy(stack_values("strix-halo-pair-split"))
    values["model"] = {
        "repo": TINY_REPO,
        "revision": "main",
        "architecture": "deepseek4",
        "layers": 4,
        "files": [model.name],
    }
    values["store"]["size"] = "1Gi"
    # Every layer and the output layer, as the stack's -ngl 44 does for 43 layers.
    values["server"]["gpuLayers"] = 5
    # The tiny model serves 256 tokens a slot (its trained context).
    values["server"].update(contextSize=256, minSlotContext=256)
    values["memory"] = {"diskReadMibps": 300}
    # Uneven workers, so the plan's --tensor-split decides which layers go where.
    values["server"]["rpc"]["workers"] = [
        {"name": name, "nodeSelector": {"kubernetes.io/hostname": name}, "vramGib": vram,
         "computeGib": 0.5}
        for name, vram in zip(WORKERS, (1.7, 1.5), strict=True)
    ]  # fmt: skip
    return values


def write_lock(model: Path, lock_path: Path) -> None:
    """The tiny model's lock, as `llm-infra lock` writes one (its GGUF header summarised)."""
    with model.open("rb") as handle:
        header = summarize([read_gguf_header(handle)])
    lock = ModelLock(
        version=LOCK_VERSION,  # type: ignore[arg-type]
        repo=TINY_REPO,
        revision="0" * 40,
        requested_revision="main",
        patterns=[model.name],
        files=[
            ModelFile(
                path=model.name,
                name=model.name,
                size=model.stat().st_size,
                sha256=hashlib.sha256(model.read_bytes()).hexdigest(),
            )
        ],
        gguf=header,
    )
    write_lock_file(lock_path, lock)


def rendered_head_argv(tmp: Path, values: dict[str, Any], model: Path) -> list[str]:
    path = tmp / "Pulumi.split.yaml"
    path.write_text(yaml.safe_dump({"config": {f"llm-infra:{k}": v for k, v in values.items()}}))
    write_lock(model, lock_path_for(path))
    out = tmp / "rendered"
    result = run_cli(["render", str(path), "--out", str(out)], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    (head,) = [
        d for d in docs
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == values["server"]["alias"]
    ]  # fmt: skip
    (container,) = [
        c for c in head["spec"]["template"]["spec"]["containers"] if c["name"] == "llama-server"
    ]
    argv: list[str] = container["args"]
    return argv


def replaced(argv: list[str], flags: dict[str, str]) -> list[str]:
    """argv with the values of the given flags replaced (each must be in the rendered argv)."""
    argv = list(argv)
    for flag, value in flags.items():
        assert flag in argv, f"the rendered argv has no {flag}: {argv}"
        argv[argv.index(flag) + 1] = value
    return argv


@dataclass(frozen=True)
class Booted:
    argv: list[str]
    log: str
    endpoints: dict[str, str]
    """Worker name → `127.0.0.1:port`."""
    completion: dict[str, Any]
    stack_dir: Path
    """Where the stack file and its lock are."""


@pytest.fixture(scope="module")
def booted(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Booted, dict[str, Any]]]:
    model: Path = request.getfixturevalue("deepseek4_model")
    binaries = rpc_build()
    tmp = tmp_path_factory.mktemp("rpc-split")
    values = split_stack_values(model)
    rendered = rendered_head_argv(tmp, values, model)
    endpoints: dict[str, str] = {}
    rpc_server = binaries / "ggml-rpc-server"
    with contextlib.ExitStack() as workers:
        for name in WORKERS:
            endpoints[name] = workers.enter_context(
                run_rpc_server(rpc_server, free_port(), tmp / f"{name}.log")
            )
        log_file = tmp / "llama-server.log"
        argv = replaced(
            rendered,
            {
                "-m": str(model),
                "--rpc": ",".join(endpoints.values()),
                "--port": str(free_port()),
                "--host": "127.0.0.1",
                "--threads": "2",
                "--log-file": str(log_file),
            },
        )
        with run_llama_server(
            argv, timeout=180, log_path=tmp / "console.log", binary=str(binaries / "llama-server")
        ) as url:
            completion_request = urllib.request.Request(
                f"{url}/v1/completions",
                data=json.dumps({"prompt": "The sky is", "max_tokens": 8}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(completion_request, timeout=120) as response:
                completion = json.loads(response.read())
        yield Booted(argv, log_file.read_text(), endpoints, completion, tmp), values


def test_head_and_two_rpc_servers_boot_with_the_rendered_argv_and_serve(
    booted: tuple[Booted, dict[str, Any]],
) -> None:
    run, _ = booted
    assert run.completion["usage"]["completion_tokens"] > 0
    assert run.completion["choices"][0]["text"]
    # The rendered split is what llama-server ran: --tensor-split from the plan, -ngl 5.
    assert run.argv[run.argv.index("--tensor-split") + 1] == "1.2,1"
    assert run.argv[run.argv.index("-ngl") + 1] == "5"


def test_load_log_shows_the_layers_on_both_rpc_devices(
    booted: tuple[Booted, dict[str, Any]],
) -> None:
    run, _ = booted
    assert "load_tensors: offloaded 5/5 layers to GPU" in run.log
    held = {ep: float(mib) for ep, mib in _MODEL_BUFFER.findall(run.log)}
    assert set(held) == set(run.endpoints.values()) and all(v > 0 for v in held.values())
    gate = check_log(run.log, 5, device_prefix="RPC", rpc_endpoints=list(run.endpoints.values()))
    assert gate.ok, gate.problems
    # Without the second worker's buffer the gate fails, naming it.
    second = run.endpoints[WORKERS[1]]
    without = "\n".join(
        line for line in run.log.splitlines() if f"[{second}] model buffer" not in line
    )
    failed = check_log(without, 5, device_prefix="RPC", rpc_endpoints=list(run.endpoints.values()))
    assert not failed.ok and any(second in p for p in failed.problems)


def logged_per_device(log: str) -> dict[tuple[str, str], tuple[float, int]]:
    """(endpoint, item) → (MiB, lines): model buffers; KV buffers plus the DSV4 state."""
    per: dict[tuple[str, str], tuple[float, int]] = {}
    for item, patterns in (("weights", [_MODEL_BUFFER]), ("kv_cache", [_KV_BUFFER, _STATE_BUFFER])):
        for pattern in patterns:
            for endpoint, mib in pattern.findall(log):
                total, lines = per.get((endpoint, item), (0.0, 0))
                per[(endpoint, item)] = (total + float(mib), lines + 1)
    return per


def test_plan_per_device_weights_and_kv_match_the_logged_buffers(
    booted: tuple[Booted, dict[str, Any]],
) -> None:
    run, values = booted
    stack = parse_stack(values)
    assert isinstance(stack, KubernetesStack)
    # The plan the render refused or accepted: from the lock's GGUF header summary.
    source = model_source(stack.model, lock_path_for(run.stack_dir / "Pulumi.split.yaml"), False)
    assert source.gguf is not None
    plan = stack_plan(stack, source)
    logged = logged_per_device(run.log)
    rows = []
    for name in WORKERS:
        device = plan.devices[f"vram:{name}"]
        for item in ("weights", "kv_cache"):
            seen, lines = logged[(run.endpoints[name], item)]
            rows.append((name, item, device.items[item] / MIB, seen, lines))
    print("\ndevice  item      planned MiB  logged MiB")
    for name, item, planned, seen, _ in rows:
        print(f"{name:<7} {item:<9} {planned:11.3f} {seen:11.2f}")
    for name, item, planned, seen, lines in rows:
        assert seen > 0, (name, item)
        # Each logged line is rounded to 0.01 MiB: half of that per line on top of the 5%.
        assert abs(planned - seen) <= TOLERANCE * seen + 0.005 * lines, (name, item, rows)
