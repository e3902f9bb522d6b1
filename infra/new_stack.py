"""A new stack for a model nobody wrote one for: `llm-infra init NAME --repo R --file PATTERN`.

From the locked model alone (its GGUF header, or a safetensors model's `config.json`) this
drafts `stacks/Pulumi.NAME.yaml`: the keys a person decides (alias, node selector, device memory,
context size, slots) and the few the stack models require, each with a one-line comment on
what it is and how to choose it; everything else is left to the models' defaults, and the
model's structure to the lock. The values are the planner's own: the highest `-ngl`, then the
largest context at it (`infra.plan.llamacpp.suggest`), never more per slot than the model
serves (`infra.plan.stack.served_context`). A docker-host stack's host, TLS and network keys
are placeholders (`<set: HOW>`) that every command refuses, naming the key and how to fill it,
until they are set.

Over ~400 lines: the kubernetes draft and its comments stay together, each comment beside the
figures it states. This module holds the request, the shared pieces and the kubernetes draft;
`infra.new_stack_docker_host` drafts a docker-host (vLLM) stack, and `infra.new_stack_text` writes
the file with PyYAML, the comments on their own lines, checked to load to exactly the document.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.boxes import BOXES
from infra.config.base import PLACEHOLDER_PREFIX, ConfigError
from infra.config.kubernetes import RESERVED_GIB
from infra.config.kubernetes_checks import node_memory_problems
from infra.config.server import ServerSettings
from infra.config.stack import lock_path_for
from infra.lock import ModelLock, ModelSource
from infra.plan.report import GIB, fmt_size

SCHEMA_LINE = "# yaml-language-server: $schema=../docs/stack.schema.json"

DEFAULT_SLOT_CONTEXT: int = ServerSettings.model_fields["min_slot_context"].default
"""Tokens a slot holds unless the model serves fewer (`server.minSlotContext`'s default)."""
HEADROOM_GIB = 4.0
"""VRAM `init` leaves free, as `plan --suggest` does (a tenth of a smaller GPU)."""


@dataclass(frozen=True)
class StackRequest:
    """What `llm-infra init` was asked for (options not given are None)."""

    name: str
    target: str
    """The kind of target the stack is for (`infra.targets.registry.init_kinds()`)."""
    alias: str | None = None
    gpu_memory_gib: float | None = None
    context_size: int | None = None
    parallel: int | None = None
    box: str | None = None
    """A box of `BOXES`, whose figures stand for the options not given."""
    node_ram_gib: float | None = None
    carve_out_gib: float | None = None
    node_cpu: str | None = None
    threads: int | None = None

    def node_figures(self) -> tuple[float, float, float, str | None, int]:
        """GPU memory, node RAM, carve-out, CPU and threads: the options, else the box's;
        ConfigError naming each option a box that is not the reference one must give."""
        box = BOXES[self.box] if self.box is not None else None
        vram = self.gpu_memory_gib or (box.gpu_memory_gib if box else None)
        ram = self.node_ram_gib or (box.node_ram_gib if box else None)
        threads = self.threads or (box.threads if box else None)
        missing = [
            f"{option}: required for a box that is not the reference one ({what}; or --box "
            f"{' | '.join(BOXES)} for its figures)"
            for option, value, what in [
                ("--gpu-memory-gib", vram, "the GPU memory llama-server may use, GiB"),
                ("--node-ram-gib", ram, "the RAM installed in the node, GiB"),
                ("--threads", threads, "the node's physical CPU cores"),
            ]
            if value is None
        ]
        if missing:
            raise ConfigError(missing)
        assert vram is not None and ram is not None and threads is not None
        if self.carve_out_gib is not None:
            carve = self.carve_out_gib
        else:
            carve = box.carve_out_gib if box else 0.0
        cpu = self.node_cpu or (box.node_cpu if box else None)
        return vram, ram, carve, cpu, threads


@dataclass
class Draft:
    """A stack file to write: its document, a comment per key path, the opening comment, and
    the figures `init` reports."""

    values: dict[str, Any]
    """The `llm-infra:` keys (namespace stripped), in the order written."""
    comments: dict[tuple[str, ...], str] = field(default_factory=dict)
    header: list[str] = field(default_factory=list)
    summary: str = ""


KEY_ORDER = ("target", "kubernetes", "model", "store", "memory", "server", "network")
"""The order a drafted kubernetes stack's keys are written in."""
NODE_OPTIONS = {
    "memory.node: carveOutGib": "--carve-out-gib",
    "memory.node": "--node-ram-gib",
}
"""The option each node-memory problem comes from."""


def namespace_of(name: str) -> str:
    """A namespace of the stack's own, from its name (`qwen3.5_a` -> `qwen3-5-a`)."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    return label if label and label[0].isalpha() else f"llm-{label}"[:63].strip("-")


def placeholder(how: str) -> str:
    """A value every command refuses until it is replaced: `<set: HOW>`."""
    return f"{PLACEHOLDER_PREFIX}{how}>"


def derived_alias(repo: str) -> str:
    """A server alias (and Kubernetes name) from a repo name: `Qwen/Qwen3-30B-A3B-GGUF` ->
    `qwen3-30b-a3b`."""
    from infra.config.kubernetes import SERVER_NAME_MAX

    name = repo.rsplit("/", 1)[-1]
    name = re.sub(r"[-_.]?gguf$", "", name, flags=re.IGNORECASE).lower()
    name = re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    if not name or not name[0].isalpha():
        name = f"model-{name}".strip("-")
    return name[:SERVER_NAME_MAX].rstrip("-")


def option_problems(problems: Sequence[str], options: Mapping[str, str]) -> list[str]:
    """Problems that name stack keys, reworded for the options `init` took them from."""
    reworded = []
    for problem in problems:
        for key, option in options.items():
            if problem.startswith(key):
                problem = option + problem[len(key) :]
                break
        reworded.append(problem)
    return reworded


# -- kubernetes (llama.cpp) -----------------------------------------------------------------


def kubernetes_draft(request: StackRequest, lock: ModelLock) -> Draft:
    """The stack of a GGUF model on llama-server in Kubernetes, sized by the planner."""
    from infra.plan.llamacpp import max_gpu_layers, suggest
    from infra.plan.stack import llamacpp_inputs, llamacpp_plan, model_structure, served_context

    if lock.gguf is None:
        raise ConfigError(
            [
                "--file: the files hold no GGUF model; target kubernetes serves GGUF files with "
                "llama.cpp (a safetensors checkpoint: --target docker-host)"
            ]
        )
    source = ModelSource(
        revision=lock.revision, files=list(lock.files), locked=True, gguf=lock.gguf
    )
    vram, ram, carve, cpu, threads = request.node_figures()
    slots = request.parallel or 1
    alias = request.alias or derived_alias(lock.repo)
    values = _kubernetes_values(lock, alias, vram, slots, DEFAULT_SLOT_CONTEXT * slots)
    values["kubernetes"] = {"namespace": namespace_of(request.name), "createNamespace": True}
    node: dict[str, Any] = {"ramGib": ram}
    if carve:
        node["carveOutGib"] = carve
    values["memory"]["node"] = node
    if cpu is not None:
        values["memory"]["nodeCpu"] = cpu
    values["server"]["threads"] = threads
    values = {key: values[key] for key in KEY_ORDER if key in values}
    node_problems = option_problems(
        node_memory_problems(parsed_stack(values).memory.node), NODE_OPTIONS
    )
    if node_problems:
        raise ConfigError(node_problems)
    structure = model_structure(parsed_stack(values), source)
    served_at = served_context(parsed_stack(values), structure)
    served = served_at.tokens if served_at else None
    if served is None and request.context_size is None:
        raise ConfigError(
            [
                f"--context-size: required: the GGUF header has no "
                f"{structure.architecture}.context_length to size the context by"
            ]
        )
    if request.context_size is not None:
        per_slot = request.context_size // slots
        if served is not None and per_slot > served:
            raise ConfigError(
                [
                    f"--context-size: {request.context_size} gives each of the {slots} slot(s) "
                    f"{per_slot} tokens, more than the {served} the model serves "
                    f"({structure.architecture}.context_length); at most {served * slots}"
                ]
            )
        floor = min(per_slot, DEFAULT_SLOT_CONTEXT)
    else:
        floor = min(served or DEFAULT_SLOT_CONTEXT, DEFAULT_SLOT_CONTEXT)
    headroom = min(HEADROOM_GIB, vram / 10)
    server = values["server"]
    server["minSlotContext"] = floor
    server["contextSize"] = request.context_size or floor * slots
    inputs = llamacpp_inputs(parsed_stack(values), source)
    if request.context_size is not None:
        ngl = max_gpu_layers(inputs, int(headroom * GIB))
        if ngl is None:
            raise ConfigError(
                [
                    f"--context-size: {request.context_size} tokens do not fit "
                    f"{vram:g} GiB of GPU memory at any number of GPU layers (lower it)"
                ]
            )
        server["gpuLayers"] = ngl
    else:
        # Contexts in steps no larger than a slot (a model trained on 256 tokens has them).
        best = suggest(inputs, headroom_gib=headroom, step=min(1024, floor))
        if best.gpu_layers is None or best.ctx_size is None:
            raise ConfigError([f"--gpu-memory-gib: {vram:g} GiB: {best.reason}"])
        if best.parallel is not None:
            raise ConfigError(
                [
                    f"--parallel: {slots} slots of {floor} tokens do not fit {vram:g} GiB of GPU "
                    f"memory; {best.parallel} would (or --context-size gives each slot less)"
                ]
            )
        server["gpuLayers"] = best.gpu_layers
        server["contextSize"] = _round_context(best.ctx_size, slots, floor)
    if server["minSlotContext"] == DEFAULT_SLOT_CONTEXT:
        del server["minSlotContext"]
    plan = llamacpp_plan(parsed_stack(values), source)
    if any(fix.changes.get("server.repack") is False for fix in plan.fixes):
        # An AMX CPU with quantized weights on the CPU: b11434 dies on their AMX buffers.
        server["repack"] = False
    # The container's memory: what the plan puts on the CPU side, and a quarter more, never
    # more than the node can give (the plan refuses, with its advice, when that is too little).
    plan = llamacpp_plan(parsed_stack(values), source)
    ram_gib = math.ceil(plan.devices["ram"].used_bytes * 1.25 / GIB)
    node_gib = parsed_stack(values).memory.node.pod_gib
    ram_gib = max(min(ram_gib, math.floor(node_gib)), 1)
    server["resources"]["limits"]["memory"] = f"{ram_gib}Gi"
    server["resources"]["requests"]["memory"] = f"{min(ram_gib, 4)}Gi"
    final = parsed_stack(values)
    plan = llamacpp_plan(final, source)
    if not plan.fits:
        raise ConfigError(plan.problems)
    draft = Draft({k: v for k, v in values.items() if v != {}})
    ngl = server["gpuLayers"]
    n_layer = structure.layers
    per_slot = server["contextSize"] // slots
    served_text = f"{served}" if served is not None else "what the model serves"
    c = draft.comments
    c[("model", "files")] = (
        "The model's files, shard 1 first; the lock pins them and records the header the plan "
        "reads."
    )
    c[("store", "size")] = (
        f"Model volume: 2 x the model's {fmt_size(lock.total_bytes)}, so an upgrade serves on "
        "until the new one is in."
    )
    c[("kubernetes", "namespace")] = (
        f"A namespace of this stack's own ({values['kubernetes']['namespace']}), created with it."
    )
    c[("store", "nodePreflight")] = (
        "Before the download, a Job on the node checks its GPU memory against vramGib, the "
        "disk and the Vulkan device, and fails in a minute with the numbers."
    )
    c[("memory", "vramGib")] = (
        f"GPU memory llama-server may use, GiB ({_given(request, '--gpu-memory-gib')}); -ngl and "
        "-c fit in it."
    )
    node_text = (
        f"of which the firmware's GPU carve-out takes {carve:g} (unified memory)"
        if carve
        else "the GPU has memory of its own"
    )
    c[("memory", "node")] = (
        f"The node's RAM: {ram:g} GiB installed ({_given(request, '--node-ram-gib')}), "
        f"{node_text}; the OS and k3s keep reservedGib (default {RESERVED_GIB:g}); the "
        f"container gets the rest, {node_gib:g} GiB."
    )
    if cpu is not None:
        c[("memory", "nodeCpu")] = (
            f"The node's CPU ({_given(request, '--node-cpu')}): which CPU-side weights llama.cpp "
            "repacks, and into what."
        )
    c[("server", "alias")] = (
        "The model name clients send (--alias, the LiteLLM route); also the Deployment's name."
    )
    c[("server", "gpuLayers")] = (
        f"-ngl: layers on the GPU, {n_layer + 1} = all {n_layer} and the output layer; the most "
        f"that fit vramGib with {headroom:g} GiB kept free."
    )
    c[("server", "contextSize")] = (
        f"-c: context of all slots together, contextSize / parallel each; at most {served_text} "
        "per slot."
    )
    c[("server", "parallel")] = "-np: requests served at once; the slots share contextSize."
    if "minSlotContext" in server:
        c[("server", "minSlotContext")] = (
            f"Tokens a slot must hold: this stack gives each {per_slot} (the default is "
            f"{DEFAULT_SLOT_CONTEXT})."
        )
    c[("server", "temperature")] = (
        "Defaults for requests that set none (llama.cpp's own; the model card may advise others)."
    )
    c[("server", "threads")] = (
        f"CPU threads for what runs on the CPU: the node's {threads} physical cores "
        f"({_given(request, '--threads')})."
    )
    if "repack" in server:
        c[("server", "repack")] = (
            f"--no-repack: the node's CPU ({cpu}) would repack the CPU layers' quantized "
            "weights into AMX buffers, on which llama.cpp b11434 dies (ggml-org/llama.cpp#26954)."
        )
    c[("server", "gpuGate")] = (
        "Not Ready unless the load log shows the layers on the GPU: a silent CPU fallback fails "
        "the deploy instead of serving slowly."
    )
    c[("server", "nodeSelector")] = (
        "Labels of the GPU node (kubectl get nodes --show-labels); the model volume is bound to it."
    )
    c[("network", "clients")] = (
        "Who reaches the server's port (its NetworkPolicy admits only these): a namespace, "
        "optionally with podLabels; add yours, e.g. {namespace: open-webui}, or k3s's Traefik: "
        "{namespace: kube-system, podLabels: {app.kubernetes.io/name: traefik}}."
    )
    c[("network", "allowCidrs")] = (
        "Addresses outside these namespaces allowed in too (CIDRs, e.g. the node's own for "
        "kubelet probes under some CNIs); the Service is ClusterIP, inside the cluster, unless "
        "network.nodePort exposes it to these networks (docs/deploy.md)."
    )
    c[("server", "resources")] = (
        "CPU and memory of the container; limits.memory holds the plan's CPU side (llm-infra "
        "plan), within what memory.node leaves."
    )
    what = lock.files[0]["name"] if len(lock.files) == 1 else f"{len(lock.files)} shards"
    lock_name = lock_path_for(Path(f"Pulumi.{request.name}.yaml")).name
    draft.header = [
        SCHEMA_LINE,
        *comment_lines(
            f"{what} ({structure.architecture}, {n_layer} layers, {fmt_size(lock.total_bytes)}) "
            f"from {lock.repo} on llama.cpp's llama-server in Kubernetes, written by "
            f"`llm-infra init`. Defaults live in infra/config/; this file sets what is particular "
            f"to this stack, and the model's structure comes from the lock ({lock_name}). Check "
            f"the commented keys, then: llm-infra plan {request.name}"
        ),
    ]
    draft.summary = (
        f"-ngl {ngl} of {n_layer + 1}, context {server['contextSize']} "
        f"({slots} slot{'s' if slots > 1 else ''} of {per_slot} tokens) in {vram:g} GiB of GPU "
        f"memory; container memory {server['resources']['limits']['memory']}"
    )
    return draft


def _given(request: StackRequest, option: str) -> str:
    """Where a figure `init` wrote comes from: its option, or the box that stood for it."""
    field_name = option.removeprefix("--").replace("-", "_")
    if getattr(request, field_name) is not None or request.box is None:
        return option
    return f"--box {request.box}: {BOXES[request.box].what}"


def _round_context(ctx: int, slots: int, floor: int) -> int:
    """A context the slots share evenly in whole 256-token blocks (as llama.cpp pads them),
    where that still gives each slot its floor."""
    rounded = ctx // (256 * slots) * 256 * slots
    return rounded if rounded >= floor * slots else ctx


def _kubernetes_values(
    lock: ModelLock, alias: str, vram: float, slots: int, context: int
) -> dict[str, Any]:
    files = [entry["path"] for entry in lock.files]
    store_gib = math.ceil(2 * lock.total_bytes / GIB / 0.98) + 1
    return {
        "target": "kubernetes",
        "model": {"repo": lock.repo, "revision": lock.requested_revision, "files": files},
        "store": {"size": f"{store_gib}Gi", "nodePreflight": True},
        "memory": {"vramGib": vram},
        "server": {
            "alias": alias,
            "gpuLayers": 0,
            "contextSize": context,
            "parallel": slots,
            "minSlotContext": DEFAULT_SLOT_CONTEXT,
            "temperature": 0.8,
            "topP": 0.95,
            "threads": 1,
            "gpuGate": True,
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "resources": {
                "requests": {"cpu": "1000m", "memory": "4Gi"},
                "limits": {"cpu": "8000m", "memory": "1024Gi"},
            },
        },
        # Written out, not left to the default: who can reach the server is visible here.
        "network": {"clients": [{"namespace": "litellm"}], "allowCidrs": []},
    }


def parsed_stack(values: Mapping[str, Any]) -> Any:
    """The stack models' reading of drafted values."""
    from infra.config.stack import parse_stack

    # Through JSON, as a stack file's values reach the models (and no alias is shared).
    return parse_stack(json.loads(json.dumps(values)))


def comment_lines(text: str) -> list[str]:
    """A comment of the stack file, wrapped to its lines."""
    lines = textwrap.wrap(text, width=97, break_on_hyphens=False, break_long_words=False)
    return [f"# {line}" for line in lines]
