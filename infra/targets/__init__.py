"""Targets: one module per platform, each wiring the components from a validated stack."""

from __future__ import annotations

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
