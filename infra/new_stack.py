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

The file is written with PyYAML and the comments added on their own lines; the text is checked
to load to exactly the document.
"""

# Over ~400 lines: the kubernetes and docker-host drafts share their comment and placeholder
# helpers; a split by target is the next step.
from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from infra.config.base import PLACEHOLDER_PREFIX, ConfigError
from infra.lock import ModelLock, ModelSource
from infra.plan.report import GB, GIB, fmt_size

NAMESPACE = "llm-infra"
SCHEMA_LINE = "# yaml-language-server: $schema=../docs/stack.schema.json"
Target = Literal["kubernetes", "docker-host"]

DEFAULT_VRAM_GIB = 90
"""A Strix Halo NUCBox (128 GB, the firmware's usual VRAM split), the kubernetes target's box."""
DEFAULT_HBM_GIB = 192
"""One MI300X, the docker-host target's GPU."""
DEFAULT_SLOT_CONTEXT = 65536
"""Tokens a slot holds unless the model serves fewer (`server.minSlotContext`'s default)."""
HEADROOM_GIB = 4.0
"""VRAM `init` leaves free, as `plan --suggest` does (a tenth of a smaller GPU)."""
VLLM_IMAGE = "vllm/vllm-openai-rocm:v0.33.0"
MAX_CONFIG_BYTES = 1024 * 1024
GGUF_ON_DOCKER_HOST = (
    "--file: the files are a GGUF model; target docker-host serves safetensors checkpoints with "
    "vLLM (GGUF: --target kubernetes)"
)


@dataclass(frozen=True)
class StackRequest:
    """What `llm-infra init` was asked for (options not given are None)."""

    name: str
    target: Target
    alias: str | None = None
    gpu_memory_gib: float | None = None
    context_size: int | None = None
    parallel: int | None = None


@dataclass
class Draft:
    """A stack file to write: its document, a comment per key path, the opening comment, and
    the figures `init` reports."""

    values: dict[str, Any]
    """The `llm-infra:` keys (namespace stripped), in the order written."""
    comments: dict[tuple[str, ...], str] = field(default_factory=dict)
    header: list[str] = field(default_factory=list)
    summary: str = ""


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
    from infra.plan.stack import llamacpp_inputs, model_structure, served_context
    from infra.targets.registry import stack_plan

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
    vram = request.gpu_memory_gib or DEFAULT_VRAM_GIB
    slots = request.parallel or 1
    alias = request.alias or derived_alias(lock.repo)
    values = _kubernetes_values(lock, alias, vram, slots, DEFAULT_SLOT_CONTEXT * slots)
    structure = model_structure(_parsed(values), source)
    served_at = served_context(_parsed(values), structure)
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
    inputs = llamacpp_inputs(_parsed(values), source)
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
    # The container's memory: what the plan puts on the CPU side, and a quarter more.
    plan = stack_plan(_parsed(values), source)
    ram_gib = math.ceil(plan.devices["ram"].used_bytes * 1.25 / GIB)
    server["resources"]["limits"]["memory"] = f"{ram_gib}Gi"
    server["resources"]["requests"]["memory"] = f"{min(ram_gib, 4)}Gi"
    final = _parsed(values)
    plan = stack_plan(final, source)
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
    c[("memory", "vramGib")] = (
        "GPU memory llama-server may use, GiB (a 128 GB Strix Halo: ~90); -ngl and -c fit in it."
    )
    c[("server", "alias")] = (
        "The model name clients send (--alias, the LiteLLM route); also the Deployment's name."
    )
    c[("server", "gpuLayers")] = (
        f"-ngl: layers on the GPU, {n_layer + 1} = all {n_layer} and the output layer; the most "
        "that fit vramGib."
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
    c[("server", "threads")] = "CPU threads for what runs on the CPU: the node's physical cores."
    c[("server", "nodeSelector")] = (
        "Labels of the GPU node (kubectl get nodes --show-labels); the model volume is bound to it."
    )
    c[("server", "resources")] = (
        "CPU and memory of the container; limits.memory holds the plan's CPU side (llm-infra plan)."
    )
    what = lock.files[0]["name"] if len(lock.files) == 1 else f"{len(lock.files)} shards"
    draft.header = [
        SCHEMA_LINE,
        *_wrapped(
            f"{what} ({structure.architecture}, {n_layer} layers, {fmt_size(lock.total_bytes)}) "
            f"from {lock.repo} on llama.cpp's llama-server in Kubernetes, written by "
            f"`llm-infra init`. Defaults live in infra/config/; this file sets what is particular "
            f"to this stack, and the model's structure comes from the lock ({request.name}"
            f".lock.json). Check the commented keys, then: llm-infra plan {request.name}"
        ),
    ]
    draft.summary = (
        f"-ngl {ngl} of {n_layer + 1}, context {server['contextSize']} "
        f"({slots} slot{'s' if slots > 1 else ''} of {per_slot} tokens) in {vram:g} GiB of GPU "
        f"memory; container memory {server['resources']['limits']['memory']}"
    )
    return draft


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
        "store": {"size": f"{store_gib}Gi"},
        "memory": {"vramGib": vram},
        "server": {
            "alias": alias,
            "gpuLayers": 0,
            "contextSize": context,
            "parallel": slots,
            "minSlotContext": DEFAULT_SLOT_CONTEXT,
            "temperature": 0.8,
            "topP": 0.95,
            "threads": 8,
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "resources": {
                "requests": {"cpu": "1000m", "memory": "4Gi"},
                "limits": {"cpu": "8000m", "memory": "1024Gi"},
            },
        },
    }


def _parsed(values: Mapping[str, Any]) -> Any:
    from infra.config.stack import parse_stack

    # Through JSON, as a stack file's values reach the models (and no alias is shared).
    return parse_stack(json.loads(json.dumps(values)))


# -- docker-host (vLLM) ---------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointConfig:
    """What `init` reads of a safetensors model's `config.json`."""

    max_position_embeddings: int
    rope_factor: float | None
    original_max_position_embeddings: int | None
    model_type: str | None

    @property
    def context_limit(self) -> int:
        """Tokens the model serves: its position limit, or the rope-scaled one."""
        if self.rope_factor and self.rope_factor > 1 and self.original_max_position_embeddings:
            scaled = int(self.original_max_position_embeddings * self.rope_factor)
            return max(self.max_position_embeddings, scaled)
        return self.max_position_embeddings


def checkpoint_config(text: bytes) -> CheckpointConfig:
    """Parse `config.json` (ConfigError naming what is missing or malformed)."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError([f"--file: config.json is not JSON ({exc})"]) from None
    if not isinstance(document, dict):
        raise ConfigError(["--file: config.json is not a JSON object"])
    # Multimodal checkpoints keep the language model's settings in text_config.
    text_config = document.get("text_config")
    settings = {**(text_config if isinstance(text_config, dict) else {}), **document}

    def count(key: str, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 26:
            raise ConfigError([f"--file: config.json {key}: {value!r} is not a token count"])
        return value

    positions = count("max_position_embeddings", settings.get("max_position_embeddings"))
    if positions is None:
        raise ConfigError(["--file: config.json has no max_position_embeddings (the context)"])
    rope = settings.get("rope_scaling")
    factor = original = None
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) not in (None, "default"):
        raw = rope.get("factor")
        factor = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
        original = count(
            "rope_scaling.original_max_position_embeddings",
            rope.get("original_max_position_embeddings"),
        )
    model_type = settings.get("model_type")
    if not (isinstance(model_type, str) and re.fullmatch(r"[a-z0-9_]{1,64}", model_type)):
        model_type = None
    return CheckpointConfig(positions, factor, original, model_type)


def docker_host_draft(request: StackRequest, lock: ModelLock, config: CheckpointConfig) -> Draft:
    """The stack of a safetensors checkpoint on vLLM (ROCm) behind Caddy on an SSH host."""
    from infra.targets.registry import stack_plan

    if lock.gguf is not None:
        raise ConfigError([GGUF_ON_DOCKER_HOST])
    hbm = request.gpu_memory_gib or DEFAULT_HBM_GIB
    limit = config.context_limit
    context = request.context_size or limit
    if context > limit:
        raise ConfigError(
            [
                f"--context-size: {context} is more than the {limit} tokens the model serves "
                "(config.json max_position_embeddings, rope-scaled where it says)"
            ]
        )
    if context < 1024:
        raise ConfigError([f"--context-size: {context} is below vLLM's 1024 (server.maxModelLen)"])
    weights = lock.total_bytes
    activations = 6 * GIB
    room = int(hbm * GIB) - weights - activations - int(0.1 * hbm * GIB)
    kv = room // GB * GB
    if kv < GIB:
        raise ConfigError(
            [
                f"--gpu-memory-gib: {hbm:g} GiB holds the weights ({fmt_size(weights)}) and "
                f"vLLM's activations ({fmt_size(activations)}) with too little left for a KV "
                "cache (1 GiB at least, 10% kept free)"
            ]
        )
    alias = request.alias or derived_alias(lock.repo)
    repo_name = lock.repo.rsplit("/", 1)[-1]
    server: dict[str, Any] = {
        "image": VLLM_IMAGE,
        "allowFloatingImage": True,
        "servedModelName": alias,
        "maxModelLen": context,
        "maxNumBatchedTokens": 2048,
    }
    if request.parallel is not None:
        server["maxNumSeqs"] = request.parallel
    server |= {"kvCacheMemoryBytes": kv, "kvOffloadingSize": 0}
    values: dict[str, Any] = {
        "target": "docker-host",
        "host": {
            "address": placeholder("the GPU host's DNS name or IP address"),
            "user": placeholder("the SSH user pulumi-command logs in as, e.g. ubuntu"),
            "hostKey": placeholder("run ssh-keyscan -t ed25519 HOST, paste the key without HOST"),
            "modelDir": f"/opt/llm/models/{repo_name}",
            "minFreeDiskGib": math.ceil((weights + 70 * GB) / GIB),
            "minRamGib": 32,
        },
        "model": {
            "repo": lock.repo,
            "revision": lock.requested_revision,
            "files": list(lock.patterns),
        },
        "memory": {"hbmGib": hbm},
        "server": server,
        "caddy": {
            "site": placeholder("the API's domain (or the host's IP with caddy.tls: internal)"),
            "tls": "auto",
            "acmeEmail": placeholder("the e-mail Let's Encrypt sends certificate notices to"),
            "allowedCidrs": [placeholder("the clients' networks, e.g. 198.51.100.0/24")],
        },
    }
    filled = _filled(values)
    plan = stack_plan(_parsed(filled), ModelSource(revision=lock.revision, files=list(lock.files),
                                                   locked=True))  # fmt: skip
    if not plan.fits:
        raise ConfigError(plan.problems)
    draft = Draft(values)
    c = draft.comments
    c[("host", "address")] = "The GPU host, reached over SSH as host.user."
    c[("host", "hostKey")] = (
        "The host's own key (ssh-keyscan -t ed25519 HOST, no host name): any other is refused."
    )
    c[("host", "modelDir")] = "Where the model lives on the host (pulumi destroy leaves it)."
    c[("host", "minFreeDiskGib")] = (
        "The preflight's floors: the weights, the image and logs (files already there count)."
    )
    c[("model", "files")] = "The checkpoint's files; the lock pins their commit, sizes and sha256."
    c[("memory", "hbmGib")] = (
        "GPU memory, GiB (192: one MI300X); server.kvCacheMemoryBytes is fitted to it."
    )
    c[("server", "image")] = (
        "Pin the digest of the build you verified: vllm/vllm-openai-rocm@sha256:<digest>."
    )
    c[("server", "servedModelName")] = "The model name clients send (the LiteLLM route)."
    c[("server", "maxModelLen")] = (
        f"--max-model-len: context of a request; at most {limit} (config.json)."
    )
    if "maxNumSeqs" in server:
        c[("server", "maxNumSeqs")] = "--max-num-seqs: requests served at once."
    c[("server", "kvCacheMemoryBytes")] = (
        "--kv-cache-memory-bytes: GPU KV cache, what weights, activations and 10% spare leave."
    )
    c[("server", "kvOffloadingSize")] = (
        "--kv-offloading-size: a KV tier in host RAM, GiB (pinned; raise minRamGib with it)."
    )
    c[("caddy", "site")] = "The HTTPS address clients use; Caddy gets its certificate."
    c[("caddy", "allowedCidrs")] = "Who may connect; everyone else gets 403."
    draft.header = [
        SCHEMA_LINE,
        *_wrapped(
            f"{lock.repo} ({config.model_type or 'safetensors'}, {fmt_size(weights)}) on vLLM "
            "ROCm behind Caddy on one GPU host over SSH, written by `llm-infra init`. Defaults "
            "live in infra/config/docker_host.py; this file sets what is particular to this "
            "stack. Every `<set: ...>` value must be replaced before render, plan or up accept "
            "the stack. Before `pulumi up`:"
        ),
        "#   pulumi config set --secret sshPrivateKey < ~/.ssh/id_ed25519",
        '#   pulumi config set --secret apiKey "$(openssl rand -hex 32)"',
    ]
    draft.summary = (
        f"--max-model-len {context}, KV cache {kv / GB:g} GB in {hbm:g} GiB of HBM; host, TLS and "
        "network keys are placeholders to fill"
    )
    return draft


_SAMPLE_FILLS = {
    ("host", "address"): "192.0.2.10",
    ("host", "user"): "ubuntu",
    ("host", "hostKey"): (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4/xsGD6cFJkzyPd9WOAb+EYO8sLhsaJw+5cfTzUQ7w"
    ),
    ("caddy", "site"): "llm.example.com",
    ("caddy", "acmeEmail"): "ops@example.com",
    ("caddy", "allowedCidrs"): ["198.51.100.0/24"],
}
"""Documentation values standing in for the placeholders while `init` checks its own draft."""


def _filled(values: dict[str, Any]) -> dict[str, Any]:
    filled: dict[str, Any] = json.loads(json.dumps(values))
    for (section, key), value in _SAMPLE_FILLS.items():
        filled[section][key] = value
    return filled


# -- the file -------------------------------------------------------------------------------


def _wrapped(text: str) -> list[str]:
    lines = textwrap.wrap(text, width=97, break_on_hyphens=False, break_long_words=False)
    return [f"# {line}" for line in lines]


class _StackDumper(yaml.SafeDumper):
    """Lists indented under their key, as the hand-written stack files have them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def stack_file_text(draft: Draft) -> str:
    """The stack file: the opening comment, then `config:` with the `llm-infra:` keys, each
    commented key with its comment on the line above; loads to exactly the document."""
    document = {"config": {f"{NAMESPACE}:{key}": value for key, value in draft.values.items()}}
    text = yaml.dump(document, Dumper=_StackDumper, sort_keys=False, width=100, allow_unicode=False)
    lines = text.splitlines()
    above: dict[int, list[str]] = {}
    config = _value_node(yaml.compose(text), "config")
    for path, comment in draft.comments.items():
        if any(ord(char) < 32 for char in comment):
            raise ValueError(f"the comment of {'.'.join(path)} is not one line")
        node: yaml.Node | None = config
        key_node = None
        for depth, part in enumerate(path):
            key_node, node = _key_and_value(node, f"{NAMESPACE}:{part}" if depth == 0 else part)
        if key_node is None:
            raise ValueError(f"no key {'.'.join(path)} to comment")
        indent = " " * key_node.start_mark.column
        above.setdefault(key_node.start_mark.line, []).append(f"{indent}# {comment}")
    written: list[str] = []
    for number, line in enumerate(lines):
        written += above.get(number, [])
        written.append(line)
    result = "\n".join([*draft.header, *written]) + "\n"
    if yaml.safe_load(result) != document:
        raise AssertionError("init: the comments changed what the stack file means")
    return result


def _value_node(node: yaml.Node | None, key: str) -> yaml.Node | None:
    return _key_and_value(node, key)[1]


def _key_and_value(node: yaml.Node | None, key: str) -> tuple[yaml.Node | None, yaml.Node | None]:
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if key_node.value == key:
                return key_node, value
    return None, None


def with_exact_files(lock: ModelLock) -> ModelLock:
    """The lock of a GGUF model with its patterns replaced by the exact repo paths it resolved
    (what `llm-infra lock` writes for a stack that lists them), so the stack names its files."""
    document = lock.model_dump(mode="json", exclude_none=True)
    document["patterns"] = [entry["path"] for entry in lock.files]
    return ModelLock.model_validate(document)


def check_lock_matches(lock: ModelLock, values: Mapping[str, Any]) -> None:
    """The lock is current for the drafted stack's model, as render will check it."""
    from infra.config.base import RepoModelSettings

    model = values["model"]
    settings = RepoModelSettings.model_validate(
        {"repo": model["repo"], "revision": model["revision"], "files": model["files"]}
    )
    stale = lock.stale_problems(settings, Path("STACK.lock.json"))
    if stale:
        raise AssertionError(f"init: the lock does not match the stack: {stale}")
