"""Targets: one module per platform, each wiring the components from a validated stack."""

from __future__ import annotations

from typing import Any

from infra.config import Mi300xStack, StackConfig
from infra.targets import docker_host, kubernetes


def endpoint_url(stack: StackConfig) -> str:
    """The base URL a stack serves (in-cluster for kubernetes: reach it by port-forward)."""
    if isinstance(stack, Mi300xStack):
        return docker_host.endpoint_url(stack)
    return kubernetes.endpoint_url(stack)


def model_name(stack: StackConfig) -> str:
    """The model id clients send (and `/v1/models` lists)."""
    if isinstance(stack, Mi300xStack):
        return stack.server.served_model_name
    return stack.server.alias


def route(stack: StackConfig) -> dict[str, Any]:
    """The stack's LiteLLM `model_list` entry, as its `litellmModel` output shows it."""
    if isinstance(stack, Mi300xStack):
        return docker_host.litellm_route(stack, endpoint_url(stack))
    return kubernetes.litellm_route(stack, endpoint_url(stack))
