"""`llm-infra init`'s draft for a box: the node's RAM as a budget, the box's own figures, and
every comment it writes true of the stack it writes."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
import yaml

from components.gguf_header import read_gguf_header, summarize
from components.payloads.fetcher import ModelFile
from infra.boxes import BOXES
from infra.config import ConfigError
from infra.hub.gguf_stub import Qwen3MoeShape, header_bytes, qwen3moe_metadata, qwen3moe_tensors
from infra.lock import ModelLock, ModelSource
from infra.new_stack import StackRequest, kubernetes_draft, parsed_stack
from infra.new_stack_text import stack_file_text
from infra.plan.llamacpp import max_gpu_layers
from infra.plan.report import GIB
from infra.plan.stack import llamacpp_inputs
from infra.targets.registry import stack_plan

# The class of model: ~67 GiB of MoE at Q4_K_M with 8 KV heads, trained for 256k.
BIG = Qwen3MoeShape(n_embd=4096, n_head_kv=8, n_ff_expert=1536, context_length=262144)
SMALL = Qwen3MoeShape()


def lock_of(shape: Qwen3MoeShape, name: str = "Big-MoE-Q4_K_M.gguf") -> ModelLock:
    """The lock `init` would write for a header-only model of this shape."""
    header, data = header_bytes(qwen3moe_metadata(shape, "MoE"), qwen3moe_tensors(shape))
    summary = summarize([read_gguf_header(io.BytesIO(header))])
    return ModelLock(
        version=1,
        repo="acme/MoE-GGUF",
        revision="0" * 40,
        requested_revision="main",
        patterns=[name],
        files=[ModelFile(path=name, name=name, size=len(header) + data, sha256="0" * 64)],
        gguf=summary,
    )


def source_of(lock: ModelLock) -> ModelSource:
    return ModelSource(revision=lock.revision, files=list(lock.files), locked=True, gguf=lock.gguf)


REFERENCE: dict[str, Any] = {"box": "strix-halo"}
OTHER_BOX: dict[str, Any] = {
    "gpu_memory_gib": 12,
    "node_ram_gib": 64,
    "threads": 8,
    "node_cpu": "sapphirerapids",
}
CARVE_OUT_96: dict[str, Any] = {
    "gpu_memory_gib": 96,
    "node_ram_gib": 128,
    "carve_out_gib": 96,
    "threads": 16,
}


def test_a_96_gib_carve_out_of_a_128_gib_box_is_refused_by_the_node_ram_q8_0_first() -> None:
    # The walk: 2 slots of 128k with an F16 KV cache put layers and their KV cache on
    # the CPU, more than the 28 GiB that 128 - 96 - 4 (the OS and k3s) leave the container.
    request = StackRequest("big", "kubernetes", context_size=262144, parallel=2, **CARVE_OUT_96)
    with pytest.raises(ConfigError) as caught:
        kubernetes_draft(request, lock_of(BIG))
    (node,) = [p for p in caught.value.problems if "the node's RAM" in p]
    assert "needed of the 28 GiB the node gives the server (memory.node" in node
    # The cheapest fix first: a q8_0 KV cache holds every layer on the GPU.
    fixes = node.split("): ", 1)[1].split(" or ")
    assert fixes[0].startswith("set server.cacheTypeK and server.cacheTypeV to q8_0")
    # Never a container limit the node cannot give.
    assert not re.search(r"limits\.memory to (29|[3-9]\d)Gi", " ".join(caught.value.problems))


def test_a_box_that_is_not_the_reference_one_must_state_its_gpu_ram_and_cores() -> None:
    with pytest.raises(ConfigError) as caught:
        kubernetes_draft(StackRequest("x", "kubernetes", context_size=8192), lock_of(SMALL))
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "--gpu-memory-gib",
        "--node-ram-gib",
        "--threads",
    ]
    assert all("--box strix-halo" in p for p in problems)


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return float(match[1])


def from_option_or_box(text: str, request: StackRequest, option: str, value: Any) -> bool:
    """The comment names where the value comes from, and the value is that option's or box's."""
    field_name = option.removeprefix("--").replace("-", "_")
    given = getattr(request, field_name)
    if given is not None:
        return option in text and given == value
    box = BOXES[request.box or ""]
    return box.what in text and getattr(box, field_name) == value


def comment_checks(
    values: dict[str, Any], lock: ModelLock, request: StackRequest
) -> dict[tuple[str, ...], Any]:
    """For each key `init` comments, what its comment must say of the stack written."""
    stack = parsed_stack(values)
    source = source_of(lock)
    inputs = llamacpp_inputs(stack, source)
    plan = stack_plan(stack, source)
    server, memory = values["server"], values["memory"]
    header = lock.gguf or {}
    n_layer = header["metadata"][f"{header['architecture']}.block_count"]
    trained = header["metadata"][f"{header['architecture']}.context_length"]
    node = stack.memory.node
    amx = stack_plan(parsed_stack({**values, "server": {**server, "repack": True}}), source)
    limit_gib = int(server["resources"]["limits"]["memory"].removesuffix("Gi"))

    def gpu_layers(text: str) -> None:
        assert _number(
            r"layers on the GPU, (\d+) = ", text
        ) == n_layer + 1 == inputs.gpu_layers or (
            _number(r"layers on the GPU, (\d+) = ", text) == n_layer + 1
        )
        assert _number(r"= all (\d+) and the output layer", text) == n_layer
        headroom = _number(r"with ([\d.]+) GiB kept free", text)
        assert max_gpu_layers(inputs, int(headroom * GIB)) == server["gpuLayers"]

    def node_ram(text: str) -> None:
        assert _number(r"([\d.]+) GiB installed", text) == node.ram_gib
        assert from_option_or_box(text, request, "--node-ram-gib", node.ram_gib)
        if node.carve_out_gib:
            assert _number(r"carve-out takes ([\d.]+)", text) == node.carve_out_gib
        else:
            assert "memory of its own" in text
        assert _number(r"reservedGib \(default ([\d.]+)\)", text) == node.reserved_gib
        assert _number(r"gets the rest, ([\d.]+) GiB", text) == pytest.approx(node.pod_gib)

    def resources(text: str) -> None:
        assert "limits.memory holds the plan's CPU side" in text and "memory.node" in text
        assert plan.devices["ram"].used_bytes <= limit_gib * GIB <= node.pod_gib * GIB

    return {
        ("kubernetes", "namespace"): lambda t: f"({values['kubernetes']['namespace']})" in t,
        ("model", "files"): lambda t: "shard 1 first" in t,
        ("store", "size"): lambda t: (
            int(values["store"]["size"].removesuffix("Gi"))
            >= 2 * _number(r"the model's ([\d.]+) GiB", t)
        ),
        ("store", "nodePreflight"): lambda t: values["store"]["nodePreflight"] is True,
        ("memory", "vramGib"): lambda t: from_option_or_box(
            t, request, "--gpu-memory-gib", memory["vramGib"]
        ),
        ("memory", "node"): node_ram,
        ("memory", "nodeCpu"): lambda t: from_option_or_box(
            t, request, "--node-cpu", memory["nodeCpu"]
        ),
        ("server", "alias"): lambda t: "--alias" in t,
        ("server", "gpuLayers"): gpu_layers,
        ("server", "contextSize"): lambda t: (
            server["contextSize"] // server["parallel"]
            <= _number(r"at most (\d+) per slot", t)
            == trained
        ),
        ("server", "parallel"): lambda t: "requests served at once" in t,
        ("server", "minSlotContext"): lambda t: (
            _number(r"gives each (\d+)", t) == server["contextSize"] // server["parallel"]
        ),
        ("server", "temperature"): lambda t: server["temperature"] == 0.8,
        ("server", "threads"): lambda t: (
            _number(r"node's (\d+) physical cores", t) == server["threads"]
        ),
        ("server", "gpuGate"): lambda t: server["gpuGate"] is True,
        ("server", "repack"): lambda t: (
            server["repack"] is False
            and f"({memory['nodeCpu']})" in t
            and any(f.changes == {"server.repack": False} for f in amx.fixes)
        ),
        ("server", "nodeSelector"): lambda t: "kubernetes.io/arch" in server["nodeSelector"],
        ("server", "resources"): resources,
        ("network", "clients"): lambda t: "NetworkPolicy admits only these" in t,
        ("network", "allowCidrs"): lambda t: (
            "CIDRs" in t
            and "nodePort" not in values["network"]
            and "network.nodePort exposes it" in t
        ),
    }


@pytest.mark.parametrize(
    ("shape", "options"),
    [
        (SMALL, {**REFERENCE}),
        (SMALL, {**OTHER_BOX}),
        (SMALL, {**REFERENCE, "parallel": 2, "context_size": 16384}),
        (BIG, {**CARVE_OUT_96, "context_size": 65536}),
    ],
    ids=["reference-box", "other-box", "two-slots", "carve-out-96"],
)
def test_every_comment_init_writes_is_true_of_the_stack_it_writes(
    shape: Qwen3MoeShape, options: dict[str, Any]
) -> None:
    lock = lock_of(shape)
    request = StackRequest("mine", "kubernetes", **options)
    draft = kubernetes_draft(request, lock)
    checks = comment_checks(draft.values, lock, request)
    unchecked = set(draft.comments) - set(checks)
    assert not unchecked, f"comments with no check of what they say: {unchecked}"
    for path, comment in draft.comments.items():
        assert checks[path](comment) is not False, (path, comment)
    # The file written loads to exactly the stack checked.
    text = stack_file_text(draft)
    assert yaml.safe_load(text)["config"]["llm-infra:server"] == draft.values["server"]
    # The header names the model's structure as the lock records it.
    assert f"{shape.n_layer} layers" in " ".join(draft.header)
