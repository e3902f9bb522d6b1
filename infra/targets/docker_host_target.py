"""Target `docker-host`: vLLM ROCm behind Caddy on one GPU host, over SSH.

Its entry in the table of targets (`infra.targets.registry.TARGETS`): the core (deploy, plan,
reference page), one server, and `init`'s draft; it has no llama.cpp server to size or tune
(vLLM's sizes are set by hand from the plan). The wiring (`infra.targets.docker_host`) is
imported when a method needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from infra.config import ConfigError, DockerHostStack, StackSecrets
from infra.lock import ModelSource
from infra.plan.report import Plan
from infra.targets.target import Drafts, OneServer, Target

if TYPE_CHECKING:
    from infra.lock import ModelLock
    from infra.new_stack import Draft, StackRequest
    from infra.new_stack_docker_host import CheckpointConfig


class DockerHostTarget(Target[DockerHostStack], OneServer[DockerHostStack], Drafts):
    """`target: docker-host`: vLLM ROCm behind Caddy on one GPU host, over SSH."""

    kind = "docker-host"

    def deploy(
        self,
        stack: DockerHostStack,
        sources: list[ModelSource],
        secrets: StackSecrets,
        expectations: list[str | None],
        plan: Plan,
    ) -> None:
        """The host's preflight, files, compose project and check."""
        from infra.targets import docker_host

        docker_host.deploy(stack, sources[0], secrets, expectations[0])

    def plan(
        self, stack: DockerHostStack, sources: list[ModelSource], header: Mapping[str, Any] | None
    ) -> Plan:
        """vLLM's HBM, the host's RAM (CPU KV tier) and disk (a GGUF header does not apply)."""
        from infra.plan.stack import vllm_plan

        return vllm_plan(stack, sources[0])

    def docs(
        self,
        stack: DockerHostStack,
        sources: list[ModelSource],
        plan: Plan,
        name: str,
        picture: str | None,
    ) -> str:
        """vLLM's flags, the memory budget and the access rules."""
        from infra.reference.page import docker_host_page

        return docker_host_page(stack, sources[0], plan, name, picture)

    # One server.

    def endpoint_url(self, stack: DockerHostStack) -> str:
        """The public URL Caddy serves."""
        from infra.targets import docker_host

        return docker_host.endpoint_url(stack)

    def model_name(self, stack: DockerHostStack) -> str:
        """vLLM's `--served-model-name`."""
        return stack.server.served_model_name

    def route(self, stack: DockerHostStack) -> dict[str, Any]:
        """The served model name, routed to Caddy's URL."""
        from infra.targets import docker_host

        return docker_host.litellm_route(stack, docker_host.endpoint_url(stack))

    def server_props(self, stack: DockerHostStack, source: ModelSource) -> dict[str, Any]:
        """vLLM's `/v1/models` (vLLM has no /props)."""
        from infra.targets import docker_host

        return docker_host.server_props(stack)

    # init's draft.

    def option_problems(self, request: StackRequest) -> list[str]:
        """The node options of a kubernetes stack: a host is described by host.* instead."""
        given = [option for option, value in (
            ("--box", request.box), ("--node-ram-gib", request.node_ram_gib),
            ("--carve-out-gib", request.carve_out_gib), ("--node-cpu", request.node_cpu),
            ("--threads", request.threads),
        ) if value is not None]  # fmt: skip
        return [f"{o}: a kubernetes option (docker-host: set host.* in the stack)" for o in given]

    def check_request(self, request: StackRequest) -> None:
        """Nothing more: the host's keys are placeholders the stack file fills."""

    def draft(
        self,
        request: StackRequest,
        locked: ModelLock,
        config_json: Callable[[], CheckpointConfig],
    ) -> tuple[ModelLock, Draft]:
        """A safetensors checkpoint on vLLM, from its config.json; a GGUF model is refused."""
        from infra import new_stack_docker_host

        if locked.gguf is not None:
            raise ConfigError([new_stack_docker_host.GGUF_ON_DOCKER_HOST])
        return locked, new_stack_docker_host.docker_host_draft(request, locked, config_json())


TARGET = DockerHostTarget()
