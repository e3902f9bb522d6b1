"""What `llm-infra init` writes for models of other architectures boots the real llama-server
b11434, and the plan's KV cache is the one it allocates (within 2%).

The stand-in hub (`llm-infra hub serve`'s own code) serves tiny real models: a qwen3moe
with grouped-query attention and experts, gpt-oss and gemma3 (sliding-window layers), glm4moe
with a NextN layer (all written here with the gguf library), a plain llama as three shards, and
llama.cpp's own tiny deepseek4 (`test-llama-archs -a deepseek4`, from the cached build). For
each: `init` → `lock` (finds init's lock current) → `plan -o json` → `render`; then
llama-server runs the rendered Deployment's container args, with the model path pointed at the
hub's copy of the file, the address and port at a free loopback one, the threads at this
machine's, and `-lv 4` added for the memory lines; and the KV bytes it logs (`llama_kv_cache:
size`, plus deepseek4's compressor state) are compared with the plan's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.config import read_stack_file
from infra.hub.repos import DirectoryRepos
from infra.hub.server import HubServer, serving
from infra.lock import stack_model_sources
from infra.plan.report import MIB
from infra.targets.registry import stack_plan
from tests.support import llama_archs
from tests.support.llama_server import free_port, run_llama_server
from tests.support.project import llm_infra, new_project
from tests.support.tiny_gguf import (
    TINY_GEMMA3,
    TINY_GLM4MOE,
    TINY_GPT_OSS,
    TinyArchSpec,
    TinyLlamaSpec,
    write_tiny_arch,
    write_tiny_model,
    write_tiny_qwen3moe,
)

TOLERANCE = 0.02
_KV = re.compile(r"llama_kv_cache: size = +([0-9.]+) MiB")
_STATE = re.compile(r"llama_dsv4_comp_state: (?:csa|hca|lid) ratio = .* size = +([0-9.]+) MiB")
_CTX_SEQ = re.compile(r"llama_context: n_ctx_seq += (\d+)")


def _write_qwen3moe(folder: Path) -> None:
    write_tiny_qwen3moe(folder, "Tiny-Qwen3MoE-F16")


def _write_llama(folder: Path) -> None:
    spec = TinyLlamaSpec(n_layer=4, n_embd=256, n_head=4, n_head_kv=4, n_ff=512)
    write_tiny_model(folder / "F32", "Tiny-Llama-F32", 3, spec)


def _writer(spec: TinyArchSpec, name: str) -> Callable[[Path], None]:
    def write(folder: Path) -> None:
        write_tiny_arch(folder, name, spec)

    return write


def _write_deepseek4(folder: Path) -> None:
    model = llama_archs.deepseek4_model()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / model.name
    try:
        os.link(model, target)  # 82 MiB: no copy where the cache shares the filesystem
    except OSError:
        shutil.copyfile(model, target)


@dataclass(frozen=True)
class Model:
    """A tiny model in the stand-in hub and how `init` is asked for it."""

    stack: str
    repo: str
    pattern: str
    write: Callable[[Path], None]
    options: tuple[str, ...] = ()


MODELS = [
    Model("qwen3moe", "acme/Tiny-Qwen3MoE-GGUF", "*.gguf", _write_qwen3moe, ("--parallel", "2")),
    Model("llama", "acme/Tiny-Llama-GGUF", "F32/*", _write_llama),
    Model("deepseek4", "ggml-org/Tiny-DeepSeek4-GGUF", "deepseek4-moe.gguf", _write_deepseek4),
    Model("gptoss", "acme/Tiny-GptOss-GGUF", "*.gguf", _writer(TINY_GPT_OSS, "Tiny-GptOss-F16"),
          ("--parallel", "2")),
    Model("glm4moe", "acme/Tiny-Glm4Moe-GGUF", "*.gguf", _writer(TINY_GLM4MOE, "Tiny-Glm-F16")),
    Model("gemma3", "acme/Tiny-Gemma3-GGUF", "*.gguf", _writer(TINY_GEMMA3, "Tiny-Gemma3-F16"),
          ("--parallel", "3")),
]  # fmt: skip


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    for model in MODELS:
        model.write(root / model.repo)
    return root


@pytest.fixture(scope="module")
def hub(hub_dir: Path) -> Iterator[str]:
    with serving(HubServer(DirectoryRepos(hub_dir))) as server:
        yield server.url


def planned_kv_bytes(stack_path: Path) -> int:
    """The plan's KV cache of the stack in bytes (`plan -o json` rounds to 0.001 GiB, more
    than a tiny model's whole cache): the same plan, taken in-process."""
    stack_file = read_stack_file(stack_path)
    stack = stack_file.stack()
    plan = stack_plan(stack, stack_model_sources(stack, stack_file.lock_path, preview=True))
    return sum(device.items.get("kv_cache", 0) for device in plan.devices.values())


def served_argv(args: list[str], model: Path, port: int) -> list[str]:
    """The rendered container args, run here: the model at hand, a free loopback port, this
    machine's threads, the memory lines logged; every other flag as rendered."""
    replaced = {"-m": str(model), "--host": "127.0.0.1", "--port": str(port), "--threads": "2"}
    argv: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--log-file":
            next(words)  # the pod's log volume; here the log is the process's output
            continue
        argv.append(word)
        if word in replaced:
            next(words)
            argv.append(replaced[word])
    if "-lv" not in argv:
        argv += ["-lv", "4"]
    return argv


@pytest.mark.parametrize("model", MODELS, ids=[m.stack for m in MODELS])
def test_llama_server_boots_what_init_renders_and_allocates_the_planned_kv_cache(
    model: Model, hub: str, hub_dir: Path, tmp_path: Path
) -> None:
    project = new_project(tmp_path / "project")
    init = llm_infra(project, "init", model.stack, "--repo", model.repo, "--file", model.pattern,
                     "--box", "strix-halo", *model.options, endpoint=hub)  # fmt: skip
    assert init.returncode == 0, init.stderr
    again = llm_infra(project, "lock", model.stack, endpoint=hub)
    assert again.returncode == 0 and "(unchanged)" in again.stdout, again.stderr
    plan = llm_infra(project, "plan", model.stack, "-o", "json")
    assert plan.returncode == 0 and json.loads(plan.stdout)["fits"], plan.stderr
    planned_mib = planned_kv_bytes(project / "stacks" / f"Pulumi.{model.stack}.yaml") / MIB
    out = project / "rendered"
    render = llm_infra(project, "render", model.stack, "--out", str(out))
    assert render.returncode == 0, render.stderr
    resources = json.loads((out / "resources.json").read_text())
    deployment = next(r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment")
    args = deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    lock = json.loads((project / "stacks" / f"{model.stack}.lock.json").read_text())
    first = hub_dir / model.repo / lock["files"][0]["path"]
    assert args[1] == f"/models/{first.name}"

    log_path = tmp_path / "llama-server.log"
    with run_llama_server(served_argv(args, first, free_port()), timeout=120, log_path=log_path):
        pass
    log = log_path.read_text(errors="replace")
    lines = [float(m[1]) for m in _KV.finditer(log)] + [float(m[1]) for m in _STATE.finditer(log)]
    assert lines, f"llama-server logged no KV cache:\n{log[-3000:]}"
    logged_mib = sum(lines)
    print(f"{model.stack}: KV cache planned {planned_mib:.2f} MiB, logged {logged_mib:.2f} MiB")
    # Each line is rounded to 0.01 MiB.
    assert abs(planned_mib - logged_mib) <= TOLERANCE * logged_mib + 0.005 * len(lines), (
        f"planned {planned_mib:.3f} MiB, llama-server allocated {logged_mib:.3f} MiB"
    )
    # The context init chose is what each slot got, and within what the model was trained on.
    context, parallel = int(args[args.index("-c") + 1]), int(args[args.index("-np") + 1])
    slot = _CTX_SEQ.search(log)
    assert slot and int(slot[1]) == context // parallel, log[-3000:]
    assert "possible training context overflow" not in log
