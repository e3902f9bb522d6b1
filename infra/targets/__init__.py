"""Targets: one module per platform, each wiring the components from a validated stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.config import ConfigError, FleetStack, Mi300xStack, StackConfig, StrixHaloStack
from infra.targets import docker_host, kubernetes

ONE_SERVER = (
    "servers: the stack has several servers, so it has no one URL or model name (pass --url "
    "and the model of one of them)"
)


def _single(stack: StackConfig) -> StrixHaloStack | Mi300xStack:
    if isinstance(stack, FleetStack):
        raise ConfigError([ONE_SERVER])
    return stack


def endpoint_url(stack: StackConfig) -> str:
    """The base URL a stack serves (in-cluster for kubernetes: reach it by port-forward)."""
    stack = _single(stack)
    if isinstance(stack, Mi300xStack):
        return docker_host.endpoint_url(stack)
    return kubernetes.endpoint_url(stack)


def server_props(stack: StackConfig, lock_path: Path, server: str | None = None) -> dict[str, Any]:
    """What the stack's server (a fleet's: the one named `server`) must report of itself
    (llama-server's /props, vLLM's /v1/models), from the inputs its render is made of; its
    inputs named by the stack file's keys. ConfigError when they cannot be built (no lock)."""
    from components.validation import ComponentInputError
    from infra.config.fleet import entry_key
    from infra.config.inputs import stack_problems
    from infra.lock import stack_model_sources

    sources = stack_model_sources(stack, lock_path, preview=True)
    if isinstance(stack, Mi300xStack):
        return docker_host.server_props(stack)
    servers = stack.server_stacks() if isinstance(stack, FleetStack) else [stack]
    index = next(
        (i for i, s in enumerate(servers) if server in (None, s.server.resource_name)), None
    )
    if index is None or (server is None and len(servers) > 1):
        raise ConfigError([ONE_SERVER])
    try:
        props = kubernetes.server_props(servers[index], sources[index])
    except ComponentInputError as exc:
        raise ConfigError(stack_problems(exc)) from None
    if isinstance(stack, FleetStack):
        own = stack.servers[index].memory is not None
        for item in props["checks"]:
            item["rendered"] = entry_key(item["rendered"], index, own)
        props["notes"] = [entry_key(note, index, own) for note in props["notes"]]
    return props


def model_name(stack: StackConfig) -> str:
    """The model id clients send (and `/v1/models` lists)."""
    stack = _single(stack)
    if isinstance(stack, Mi300xStack):
        return stack.server.served_model_name
    return stack.server.alias


def route(stack: StackConfig) -> dict[str, Any]:
    """The stack's LiteLLM `model_list` entry, as its `litellmModel` output shows it."""
    stack = _single(stack)
    if isinstance(stack, Mi300xStack):
        return docker_host.litellm_route(stack, endpoint_url(stack))
    return kubernetes.litellm_route(stack, endpoint_url(stack))


def routes(stack: StackConfig) -> list[dict[str, Any]]:
    """The stack's LiteLLM `model_list`: an entry per server (`litellmModelList` of a fleet)."""
    if isinstance(stack, FleetStack):
        return [
            kubernetes.litellm_route(server, kubernetes.endpoint_url(server))
            for server in stack.server_stacks()
        ]
    return [route(stack)]
