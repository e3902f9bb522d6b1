"""Targets: one module per target (its `Target` class: the core and the optional parts it has),
the wiring of the components from a validated stack, and one table of the targets
(`infra.targets.registry`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.config import ConfigError, StackConfig
from infra.targets.registry import (
    ONE_SERVER,
    TARGETS,
    Drafts,
    OneServer,
    SizesLlamaCpp,
    Target,
    TunedRuntimes,
    endpoint_url,
    model_name,
    one_server,
    render_docs,
    route,
    routes,
    stack_plan,
    target_of,
)

__all__ = [
    "ONE_SERVER",
    "TARGETS",
    "Drafts",
    "OneServer",
    "SizesLlamaCpp",
    "Target",
    "TunedRuntimes",
    "endpoint_url",
    "model_name",
    "one_server",
    "render_docs",
    "route",
    "routes",
    "server_props",
    "stack_plan",
    "target_of",
]


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
