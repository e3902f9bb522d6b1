"""`llm-infra init` against the stand-in hub: a stack and its lock from a repo and a pattern,
which lock, plan and render then accept (offline); its refusals name the option."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.hub.gguf_stub import SAMPLE_FILE, SAMPLE_REPO, write_sample
from infra.hub.repos import DirectoryRepos
from infra.hub.server import HubServer, serving
from infra.new_stack import SCHEMA_LINE
from tests.conftest import ROOT
from tests.support.hub_emulator import Hub, running_hub
from tests.support.project import llm_infra, new_project
from tests.support.tiny_gguf import (
    CONTEXT_LENGTH,
    N_LAYER,
    TINY_GEMMA3,
    TINY_GLM4MOE,
    TINY_GPT_OSS,
    TinyLlamaSpec,
    write_tiny_arch,
    write_tiny_model,
    write_tiny_qwen3moe,
)

REPO = "acme/Tiny-Llama-GGUF"
SHARDS = [f"Q8_0/Tiny-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
CHECKPOINT = "acme/Tiny-Checkpoint"
STRUCTURE_KEYS = ("architecture", "layers", "sizeGib", "metadata")
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4/xsGD6cFJkzyPd9WOAb+EYO8sLhsaJw+5cfTzUQ7w"


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    source = tmp_path_factory.mktemp("models")
    shards = write_tiny_model(source / "q8", "Tiny-Q8_0", 3, TinyLlamaSpec())
    single = write_tiny_model(source / "q4", "Tiny-Q4_0", 1, TinyLlamaSpec())
    files = {f"Q8_0/{p.name}": p.read_bytes() for p in shards}
    files["Q4_0/Tiny-Q4_0.gguf"] = single[0].read_bytes()
    files["README.md"] = b"# tiny\n"
    return files


@pytest.fixture
def hub(tiny_files: dict[str, bytes]) -> Iterator[Hub]:
    checkpoint = {
        "config.json": json.dumps(
            {"model_type": "llama", "max_position_embeddings": 32768, "vocab_size": 256}
        ).encode(),
        "model-00001-of-00001.safetensors": b"s" * 50_000,
    }
    with running_hub(Hub(repos={REPO: dict(tiny_files), CHECKPOINT: checkpoint})) as served:
        yield served


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return new_project(tmp_path / "project")


def stack_document(project: Path, name: str) -> dict[str, Any]:
    """The stack file's `llm-infra:` keys, namespace stripped."""
    document = yaml.safe_load((project / "stacks" / f"Pulumi.{name}.yaml").read_text())
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}


def comment_above(text: str, key: str) -> str:
    """The comment line right above a key's line (`server:` keys are unique in these files)."""
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
    above = lines[index - 1].strip()
    assert above.startswith("# "), f"{key} has no comment above it: {above!r}"
    return above


def deployment_args(out: Path) -> list[str]:
    resources = json.loads((out / "resources.json").read_text())
    deployment = next(r for r in resources if r["type"] == "kubernetes:apps/v1:Deployment")
    args: list[str] = deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_init_writes_a_stack_and_lock_that_lock_plan_and_render_accept(
    hub: Hub, project: Path
) -> None:
    result = llm_infra(project, "init", "tiny", "--box", "strix-halo", "--repo", REPO,
                       "--file", "Q8_0/*", endpoint=hub.url)  # fmt: skip
    assert result.returncode == 0, result.stderr
    stack_path = project / "stacks" / "Pulumi.tiny.yaml"
    lock_path = project / "stacks" / "tiny.lock.json"
    text = stack_path.read_text()
    assert text.splitlines()[0] == SCHEMA_LINE
    values = stack_document(project, "tiny")
    # The files it resolved, exactly; the structure is the lock's, never the stack file's.
    assert values["model"] == {"repo": REPO, "revision": "main", "files": SHARDS}
    assert not set(STRUCTURE_KEYS) & set(values["model"])
    server = values["server"]
    # The highest -ngl (every layer and the output layer), the model's whole trained context.
    assert server["gpuLayers"] == N_LAYER + 1
    assert server["contextSize"] == CONTEXT_LENGTH and server["parallel"] == 1
    assert server["alias"] == "tiny-llama"
    for key in ("alias", "nodeSelector", "vramGib", "contextSize", "parallel", "gpuLayers"):
        assert len(comment_above(text, key)) > 20
    # Who can reach the server is written out, with how to add a client.
    assert values["network"] == {"clients": [{"namespace": "litellm"}], "allowCidrs": []}
    assert "NetworkPolicy admits only these" in text and "podLabels" in text
    # The lock is the one `llm-infra lock` writes for this stack.
    written = lock_path.read_text()
    again = llm_infra(project, "lock", "tiny", endpoint=hub.url)
    assert again.returncode == 0, again.stderr
    assert "(unchanged)" in again.stdout and lock_path.read_text() == written
    # Offline from here on: no HF_ENDPOINT, and huggingface.co is never reachable from a test.
    plan = llm_infra(project, "plan", "tiny", "-o", "json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["fits"] is True
    out = project / "rendered"
    render = llm_infra(project, "render", "tiny", "--out", str(out))
    assert render.returncode == 0, render.stderr
    args = deployment_args(out)
    assert args[:2] == ["-m", f"/models/{SHARDS[0].rsplit('/', 1)[1]}"]
    assert flag(args, "-ngl") == str(N_LAYER + 1) and flag(args, "-c") == str(CONTEXT_LENGTH)
    assert flag(args, "--alias") == "tiny-llama"


def test_init_never_overwrites_a_stack_without_force(hub: Hub, project: Path) -> None:
    args = ("init", "tiny", "--box", "strix-halo", "--repo", REPO, "--file", "Q8_0/*")
    assert llm_infra(project, *args, endpoint=hub.url).returncode == 0
    stack_path = project / "stacks" / "Pulumi.tiny.yaml"
    before = stack_path.read_text()
    refused = llm_infra(project, *args, "--parallel", "2", endpoint=hub.url)
    assert refused.returncode == 2
    assert "stacks/Pulumi.tiny.yaml and stacks/tiny.lock.json: exist (--force" in refused.stderr
    assert stack_path.read_text() == before
    forced = llm_infra(project, *args, "--parallel", "2", "--force", endpoint=hub.url)
    assert forced.returncode == 0, forced.stderr
    assert stack_document(project, "tiny")["server"]["parallel"] == 2


def test_the_context_is_never_more_than_the_model_was_trained_on(hub: Hub, project: Path) -> None:
    # The tiny model's KV cache is a few MiB per 100k tokens: memory would allow far more.
    slots = llm_infra(project, "init", "tiny", "--box", "strix-halo", "--repo", REPO,
                      "--file", "Q4_0/*", "--parallel", "2", endpoint=hub.url)  # fmt: skip
    assert slots.returncode == 0, slots.stderr
    server = stack_document(project, "tiny")["server"]
    assert server["contextSize"] == 2 * CONTEXT_LENGTH and server["parallel"] == 2
    asked = llm_infra(project, "init", "other", "--box", "strix-halo", "--repo", REPO,
                      "--file", "Q4_0/*", "--context-size", str(4 * CONTEXT_LENGTH),
                      endpoint=hub.url)  # fmt: skip
    assert asked.returncode == 2
    assert f"--context-size: {4 * CONTEXT_LENGTH} gives each of the 1 slot(s)" in asked.stderr
    assert f"more than the {CONTEXT_LENGTH} the model serves" in asked.stderr
    assert not (project / "stacks" / "Pulumi.other.yaml").exists()


def test_options_set_device_memory_context_slots_and_alias(hub: Hub, project: Path) -> None:
    result = llm_infra(
        project, "init", "small", "--repo", REPO, "--file", "Q4_0/Tiny-Q4_0.gguf",
        "--gpu-memory-gib", "2", "--node-ram-gib", "16", "--threads", "4", "--node-cpu", "haswell",
        "--context-size", "8192", "--parallel", "2", "--alias", "mine", endpoint=hub.url,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    values = stack_document(project, "small")
    # A box that is not the reference one: its own figures, and nothing of the reference box's.
    assert values["memory"] == {"vramGib": 2, "node": {"ramGib": 16}, "nodeCpu": "haswell"}
    server = values["server"]
    assert (server["contextSize"], server["parallel"], server["alias"]) == (8192, 2, "mine")
    assert server["threads"] == 4
    # Below the default slot context: the stack says what each slot holds, so its checks pass.
    assert server["minSlotContext"] == 4096
    plan = llm_infra(project, "plan", "small", "-o", "json")
    assert plan.returncode == 0, plan.stderr


@pytest.fixture
def sample_hub(tmp_path: Path) -> Iterator[str]:
    """The header-only Qwen3-30B-A3B sample served from a directory (its 17 GiB are a hole)."""
    write_sample(tmp_path / "hub")
    with serving(HubServer(DirectoryRepos(tmp_path / "hub"))) as server:
        yield server.url


def test_a_model_larger_than_the_gpu_gets_the_layers_that_fit_and_memory_for_the_rest(
    sample_hub: str, project: Path
) -> None:
    # A box that is not the reference one: a 12 GiB discrete GPU in a 64 GiB node.
    result = llm_infra(project, "init", "qwen3", "--repo", SAMPLE_REPO, "--file", SAMPLE_FILE,
                       "--gpu-memory-gib", "12", "--node-ram-gib", "64", "--threads", "8",
                       endpoint=sample_hub)  # fmt: skip
    assert result.returncode == 0, result.stderr
    server = stack_document(project, "qwen3")["server"]
    assert 1 < server["gpuLayers"] < 49
    # Each slot holds the model's whole trained context (40960), the plan fits as written.
    assert server["contextSize"] == 40960
    plan = llm_infra(project, "plan", "qwen3", "-o", "json")
    assert plan.returncode == 0, plan.stderr
    devices = json.loads(plan.stdout)["devices"]
    assert devices["vram"]["used_gib"] <= 12 - 1.2  # a tenth of a small GPU kept free
    assert devices["ram"]["used_gib"] <= devices["ram"]["capacity_gib"]
    # The layers left on the CPU (some in repack buffers) are in its limit.
    ram = devices["ram"]["items"]
    assert ram["weights"] + ram["repacked_weights"] > 17.3 - 12
    # One more GPU layer would not have fitted with the headroom kept.
    one_more = json.loads(
        llm_infra(project, "plan", "qwen3", "-o", "json", "--suggest", "--headroom", "1.2").stdout
    )
    assert one_more["suggest"]["gpu_layers"] == server["gpuLayers"]


def test_docker_host_placeholders_are_refused_by_render_naming_each_key_and_how(
    hub: Hub, project: Path
) -> None:
    result = llm_infra(project, "init", "ckpt", "--target", "docker-host", "--repo", CHECKPOINT,
                       "--file", "*.safetensors", "--file", "*.json", endpoint=hub.url)  # fmt: skip
    assert result.returncode == 0, result.stderr
    stack_path = project / "stacks" / "Pulumi.ckpt.yaml"
    text = stack_path.read_text()
    assert "pulumi config set --secret sshPrivateKey" in text
    assert "pulumi config set --secret apiKey" in text
    render = llm_infra(project, "render", "ckpt", "--out", str(project / "out"))
    assert render.returncode == 2
    assert "Traceback" not in render.stderr
    refused = {line.split(":", 1)[0] for line in render.stderr.splitlines()[1:]}
    assert refused == {"host.address", "host.user", "host.hostKey", "caddy.site",
                       "caddy.acmeEmail", "caddy.allowedCidrs[0]"}  # fmt: skip
    assert "host.hostKey: not set yet: run ssh-keyscan -t ed25519 HOST" in render.stderr
    values = stack_document(project, "ckpt")
    assert values["server"]["maxModelLen"] == 32768  # config.json's max_position_embeddings
    document = yaml.safe_load(text)
    config = document["config"]
    config["llm-infra:host"] |= {
        "address": "192.0.2.10",
        "user": "ubuntu",
        "hostKey": HOST_KEY,
    }
    config["llm-infra:caddy"] |= {
        "site": "llm.example.com",
        "acmeEmail": "ops@example.com",
        "allowedCidrs": ["198.51.100.0/24"],
    }
    stack_path.write_text(yaml.safe_dump(document))
    filled = llm_infra(project, "render", "ckpt", "--out", str(project / "out"))
    assert filled.returncode == 0, filled.stderr


def test_an_unreachable_hub_exits_3_naming_the_endpoint_options(project: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    result = llm_infra(project, "init", "tiny", "--box", "strix-halo", "--repo", REPO,
                       "--file", "Q8_0/*", "--endpoint", closed)  # fmt: skip
    assert result.returncode == 3
    assert "--repo: cannot reach" in result.stderr
    assert "the hub is --endpoint, else $HF_ENDPOINT" in result.stderr
    assert not (project / "stacks").exists()


@pytest.mark.parametrize(
    ("args", "message", "fetched"),
    [
        (["Bad Name", "--file", "Q8_0/*"], "NAME: 'Bad Name' is not a stack name", False),
        (["x", "--repo", "no repo", "--file", "Q8_0/*"], "--repo: ", False),
        (["x", "--file", "../Q8_0/*"], "--file '../Q8_0/*': '../Q8_0/*' is not a repo path", False),
        (["x", "--file", "Q8_0/*", "--gpu-memory-gib", "0"], "--gpu-memory-gib: 0 is not", False),
        (["x", "--file", "Q8_0/*", "--alias", "Not_A_Name"], "--alias: 'Not_A_Name'", False),
        (["x", "--file", "Q9/*"], "--file 'Q9/*': 'Q9/*' matches no file", True),
        (["x", "--repo", "acme/Nope", "--file", "Q8_0/*"], "--repo: 'acme/Nope' not found", True),
        (["x", "--file", "*/*.gguf"], "--file: the patterns take in 2 models", True),
        (["x", "--file", "Q8_0/*", "--target", "docker-host"], "--file: the files are a GGU", True),
    ],
)
def test_bad_input_names_the_option(
    hub: Hub, project: Path, args: list[str], message: str, fetched: bool
) -> None:
    name, *rest = args
    repo = [] if "--repo" in rest else ["--repo", REPO]
    box = [] if "--target" in rest else ["--box", "strix-halo"]
    result = llm_infra(project, "init", name, *box, *repo, *rest, endpoint=hub.url)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert bool(hub.requests) == fetched
    assert not (project / "stacks").exists()


ARCHITECTURES = {
    "gpt-oss": TINY_GPT_OSS,
    "glm4moe": TINY_GLM4MOE,
    "qwen3moe": None,
    "gemma3": TINY_GEMMA3,
}
"""The architectures many owners of these boxes run, as tiny generated models: gpt-oss (named
with a hyphen, sliding window), glm4moe (a NextN layer), qwen3moe, gemma3 (sliding window)."""


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_each_architecture_goes_init_lock_plan_render_in_one_try(
    arch: str, project: Path, tmp_path: Path
) -> None:
    spec = ARCHITECTURES[arch]
    model = (
        write_tiny_qwen3moe(tmp_path, "Tiny-Q8_0")
        if spec is None
        else write_tiny_arch(tmp_path, "Tiny-Q8_0", spec)
    )
    repo = f"acme/Tiny-{arch}-GGUF"
    name = arch.replace("-", "")
    with running_hub(Hub(repos={repo: {f"Q8_0/{model.name}": model.read_bytes()}})) as served:
        init = llm_infra(project, "init", name, "--box", "strix-halo", "--repo", repo,
                         "--file", "Q8_0/*", endpoint=served.url)  # fmt: skip
        assert init.returncode == 0, init.stderr
        lock = llm_infra(project, "lock", name, endpoint=served.url)
        assert lock.returncode == 0, lock.stderr
    locked = json.loads((project / "stacks" / f"{name}.lock.json").read_text())
    assert locked["gguf"]["architecture"] == arch
    plan = llm_infra(project, "plan", name, "-o", "json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["fits"] is True
    # Every architecture here is one the plan models: no assumption about its cache.
    text = llm_infra(project, "plan", name, "-v")
    assert text.returncode == 0, text.stderr
    assert "assumed: architecture" not in text.stdout
    if arch == "glm4moe":
        assert "glm4moe: the NextN/MTP layer weights" in text.stdout
    if spec is not None and spec.sliding_window:
        assert f"attend through a {spec.sliding_window}-token sliding window" in text.stdout
    out = project / "rendered"
    render = llm_infra(project, "render", name, "--out", str(out))
    assert render.returncode == 0, render.stderr
    assert deployment_args(out)[:2] == ["-m", f"/models/{model.name}"]


# A size in decimal gigabytes: `68 GB`, `(GB)`; not a rate (`GB/s`) and not `GiB`.
DECIMAL_GB = re.compile(r"\bGB\b(?!/s)")


def test_init_and_plan_print_every_size_in_gib_never_gb(hub: Hub, project: Path) -> None:
    outputs = {}
    for name, options in [
        ("tiny", ["--box", "strix-halo", "--repo", REPO, "--file", "Q8_0/*"]),
        ("ckpt", ["--target", "docker-host", "--repo", CHECKPOINT,
                  "--file", "*.safetensors", "--file", "*.json"]),
    ]:  # fmt: skip
        init = llm_infra(project, "init", name, *options, endpoint=hub.url)
        assert init.returncode == 0, init.stderr
        outputs[f"init {name}"] = init.stdout + init.stderr
        outputs[f"{name} stack file"] = (project / "stacks" / f"Pulumi.{name}.yaml").read_text()
    for name, stack in [("tiny", "tiny"), ("mi300x", str(ROOT / "stacks/Pulumi.mi300x.yaml"))]:
        for options in ([], ["-v"], ["-o", "json"]):
            plan = llm_infra(project, "plan", stack, *options)
            assert plan.returncode == 0, plan.stderr
            outputs[f"plan {name} {options}"] = plan.stdout + plan.stderr
    assert "GiB" in outputs["init ckpt"] and "GiB" in outputs["plan mi300x []"]
    in_gb = {what: DECIMAL_GB.findall(text) for what, text in outputs.items()}
    assert {what: found for what, found in in_gb.items() if found} == {}
