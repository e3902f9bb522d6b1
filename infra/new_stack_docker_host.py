"""A new docker-host (vLLM) stack's draft, from a safetensors model's `config.json`."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from infra.config.base import ConfigError
from infra.lock import ModelLock, ModelSource
from infra.new_stack import (
    SCHEMA_LINE,
    Draft,
    StackRequest,
    comment_lines,
    derived_alias,
    parsed_stack,
    placeholder,
)
from infra.plan.report import GB, GIB, fmt_size

# -- docker-host (vLLM) ---------------------------------------------------------------------


DEFAULT_HBM_GIB = 192
"""One MI300X, the docker-host target's GPU."""
VLLM_IMAGE = "vllm/vllm-openai-rocm:v0.33.0"
MAX_CONFIG_BYTES = 1024 * 1024
"""The most of a `config.json` `init` reads."""
GGUF_ON_DOCKER_HOST = (
    "--file: the files are a GGUF model; target docker-host serves safetensors checkpoints with "
    "vLLM (GGUF: --target kubernetes)"
)


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
    from infra.plan.stack import vllm_plan

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
    source = ModelSource(revision=lock.revision, files=list(lock.files), locked=True)
    plan = vllm_plan(parsed_stack(filled), source)
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
        *comment_lines(
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
        f"--max-model-len {context}, KV cache {fmt_size(kv)} in {hbm:g} GiB of HBM; host, TLS and "
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
