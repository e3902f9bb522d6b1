"""The table of targets: what each kind of stack does, keyed as the stack file says it.

`target: kubernetes` (one llama.cpp server), `target: docker-host` (vLLM behind Caddy) and a
fleet (`target: kubernetes` with `servers:`) each have one target module,
`infra/targets/<kind>_target.py`, whose `TARGET` is its entry in `TARGETS`; the table has one
entry per kind of stack model (`infra.config.stack.STACK_MODELS`), so a new kind of stack needs
no line here. Every target has the `Target` core; the optional parts (`infra.targets.target`)
are asked for through this module, which answers a target without the part with the error (or
the default) the command gives. Callers ask `target_of(stack)`; no other module switches on a
stack's type (tests/unit/test_target_registry.py keeps it so), and the lists of targets
elsewhere (`init --target`) are read from `TARGETS`. A target module imports its wiring
(`kubernetes`, `docker_host`, `cluster`) when a method needs it, so a command that only plans
never loads the Kubernetes provider.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.config import ConfigError, KubernetesStack, StackConfig
from infra.config.stack import STACK_MODELS
from infra.lock import ModelSource
from infra.plan.report import Plan
from infra.targets.target import (
    Drafts,
    OneServer,
    SizesLlamaCpp,
    Target,
    TunedRuntimes,
)

__all__ = [
    "ONE_SERVER",
    "TARGETS",
    "Drafts",
    "OneServer",
    "SizesLlamaCpp",
    "Target",
    "TunedRuntimes",
    "drafts",
    "endpoint_url",
    "init_kinds",
    "llamacpp_server",
    "model_name",
    "one_server",
    "render_docs",
    "route",
    "routes",
    "server_props",
    "stack_plan",
    "target_module",
    "target_of",
    "with_tuned_runtimes",
]

ONE_SERVER = (
    "servers: the stack has several servers, so it has no one URL or model name (pass --url "
    "and the model of one of them)"
)


def target_module(kind: str) -> str:
    """The module of the target of `kind`: `docker-host` → `infra.targets.docker_host_target`."""
    return f"infra.targets.{kind.replace('-', '_')}_target"


TARGETS: dict[str, Target[Any]] = {
    kind: importlib.import_module(target_module(kind)).TARGET for kind in STACK_MODELS
}
"""Every target, by the kind of stack it deploys (`StackConfig`'s models, `kind`)."""


def target_of(stack: StackConfig) -> Target[Any]:
    """The target that deploys `stack`."""
    return TARGETS[stack.kind]


def init_kinds() -> list[str]:
    """The targets `llm-infra init` drafts a stack for (`--target`), in the table's order."""
    return [kind for kind, target in TARGETS.items() if isinstance(target, Drafts)]


def drafts(kind: str) -> Drafts:
    """The init part of the target `kind` (one of `init_kinds()`)."""
    target = TARGETS[kind]
    assert isinstance(target, Drafts), kind
    return target


def one_server(stack: StackConfig) -> OneServer[Any]:
    """The one-server part of the stack's target; ConfigError for several servers."""
    target = target_of(stack)
    if not isinstance(target, OneServer):
        raise ConfigError([ONE_SERVER])
    return target


def llamacpp_server(stack: StackConfig) -> KubernetesStack | None:
    """The stack's one llama.cpp server: what `plan --suggest` sizes and `tune` bakes off
    (None: vLLM, or a fleet, whose servers are taken one at a time)."""
    target = target_of(stack)
    return target.llamacpp_server(stack) if isinstance(target, SizesLlamaCpp) else None


def with_tuned_runtimes(stack: StackConfig, lock_path: Path) -> StackConfig:
    """The stack with each `server.runtime: tuned` replaced by its tune record's winner, which
    must pass the checks of a runtime named in the stack file; ConfigError otherwise (a target
    without tuned runtimes: the stack itself)."""
    target = target_of(stack)
    return target.with_tuned(stack, lock_path) if isinstance(target, TunedRuntimes) else stack


def stack_plan(
    stack: StackConfig,
    source: ModelSource | list[ModelSource],
    header_summary: Mapping[str, Any] | None = None,
) -> Plan:
    """The stack's memory plan (a fleet: one ModelSource per server, in `servers:` order; one
    source stands for every server)."""
    count = len(stack.server_stacks())
    sources = source if isinstance(source, list) else [source] * count
    return target_of(stack).plan(stack, sources, header_summary)


def endpoint_url(stack: StackConfig) -> str:
    """The base URL a stack serves (in-cluster for kubernetes: reach it by port-forward)."""
    return one_server(stack).endpoint_url(stack)


def server_props(stack: StackConfig, lock_path: Path, server: str | None = None) -> dict[str, Any]:
    """What the stack's server (a fleet's: the one named `server`) must report of itself
    (llama-server's /props, vLLM's /v1/models), from the inputs its render is made of; its
    inputs named by the stack file's keys. ConfigError when they cannot be built (no lock)."""
    from components.validation import ComponentInputError
    from infra.config.inputs import stack_problems
    from infra.lock import stack_model_sources

    sources = stack_model_sources(stack, lock_path, preview=True)
    servers = stack.server_stacks()
    names = stack.server_names()
    index = next(
        (i for i, name in enumerate(names) if name is None or server in (None, name)), None
    )
    if index is None or (server is None and len(servers) > 1):
        raise ConfigError([ONE_SERVER])
    single = servers[index]
    try:
        props = one_server(single).server_props(single, sources[index])
    except ComponentInputError as exc:
        raise ConfigError(stack_problems(exc)) from None
    if "checks" in props:
        for item in props["checks"]:
            item["rendered"] = stack.server_key(item["rendered"], index)
    if "notes" in props:
        props["notes"] = [stack.server_key(note, index) for note in props["notes"]]
    return props


def model_name(stack: StackConfig) -> str:
    """The model id clients send (and `/v1/models` lists)."""
    return one_server(stack).model_name(stack)


def route(stack: StackConfig) -> dict[str, Any]:
    """The stack's LiteLLM `model_list` entry, as its `litellmModel` output shows it."""
    return one_server(stack).route(stack)


def routes(stack: StackConfig) -> list[dict[str, Any]]:
    """The stack's LiteLLM `model_list`: an entry per server (`litellmModelList` of a fleet)."""
    return [route(server) for server in stack.server_stacks()]


def render_docs(
    stack: StackConfig,
    sources: list[ModelSource],
    plan: Plan,
    name: str,
    picture: str | None = None,
) -> str:
    """The reference page of a stack (a fleet: one section per server) from its plan, showing
    the plan picture at `picture` (a path relative to the page) when given."""
    return target_of(stack).docs(stack, sources, plan, name, picture)
