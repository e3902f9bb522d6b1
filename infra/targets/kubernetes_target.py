"""Target `kubernetes`: one llama.cpp server and its model store on a k3s node.

Its entry in the table of targets (`infra.targets.registry.TARGETS`): the core (deploy, plan,
reference page) and every optional part: one server, a llama.cpp server to size and tune,
tuned runtimes, and `init`'s draft. The wiring (`infra.targets.kubernetes`,
`infra.targets.cluster`) is imported when a method needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.config import KubernetesStack, StackConfig, StackSecrets
from infra.lock import ModelSource
from infra.plan.report import Plan
from infra.targets.target import Drafts, OneServer, SizesLlamaCpp, Target, TunedRuntimes

if TYPE_CHECKING:
    from infra.lock import ModelLock
    from infra.new_stack import Draft, StackRequest
    from infra.new_stack_docker_host import CheckpointConfig


class KubernetesTarget(
    Target[KubernetesStack],
    OneServer[KubernetesStack],
    SizesLlamaCpp[KubernetesStack],
    TunedRuntimes[KubernetesStack],
    Drafts,
):
    """`target: kubernetes`: one llama.cpp server and its model store on a k3s node."""

    kind = "kubernetes"

    def deploy(
        self,
        stack: KubernetesStack,
        sources: list[ModelSource],
        secrets: StackSecrets,
        expectations: list[str | None],
        plan: Plan,
    ) -> None:
        """The store, the server and the outputs a single-server stack always had."""
        from infra.targets import cluster

        cluster.deploy(stack, sources, secrets, plan, expectations)

    def plan(
        self, stack: KubernetesStack, sources: list[ModelSource], header: Mapping[str, Any] | None
    ) -> Plan:
        """llama.cpp's placement of the model over VRAM and RAM, and the volume."""
        from infra.plan.stack import llamacpp_plan

        return llamacpp_plan(stack, sources[0], header)

    def docs(
        self,
        stack: KubernetesStack,
        sources: list[ModelSource],
        plan: Plan,
        name: str,
        picture: str | None,
    ) -> str:
        """The server's flags, placement, probes and access."""
        from infra.reference.page import kubernetes_page

        return kubernetes_page(stack, sources[0], plan, name, picture)

    # One server.

    def endpoint_url(self, stack: KubernetesStack) -> str:
        """The in-cluster URL of the server's Service."""
        from infra.targets import kubernetes

        return kubernetes.endpoint_url(stack)

    def model_name(self, stack: KubernetesStack) -> str:
        """llama-server's `--alias`."""
        return stack.server.alias

    def route(self, stack: KubernetesStack) -> dict[str, Any]:
        """The alias, routed to the Service's URL."""
        from infra.targets import kubernetes

        return kubernetes.litellm_route(stack, kubernetes.endpoint_url(stack))

    def server_props(self, stack: KubernetesStack, source: ModelSource) -> dict[str, Any]:
        """llama-server's `/props`, as the verify Job checks it."""
        from infra.targets import kubernetes

        return kubernetes.server_props(stack, source)

    # A llama.cpp server to size and tune, and tuned runtimes.

    def llamacpp_server(self, stack: KubernetesStack) -> KubernetesStack:
        """The stack's own server."""
        return stack

    def with_tuned(self, stack: KubernetesStack, lock_path: Path) -> StackConfig:
        """The server's tune record's winner, when its runtime is `tuned`."""
        from infra.tune import tuned_server

        return tuned_server(stack, lock_path)

    # init's draft.

    def option_problems(self, request: StackRequest) -> list[str]:
        """None: every init option is one of this target's."""
        return []

    def check_request(self, request: StackRequest) -> None:
        """The node's figures: the options, else the --box's (ConfigError naming each missing
        one)."""
        request.node_figures()

    def draft(
        self,
        request: StackRequest,
        locked: ModelLock,
        config_json: Callable[[], CheckpointConfig],
    ) -> tuple[ModelLock, Draft]:
        """A GGUF model on llama-server, sized by the planner; the lock names its exact files."""
        from infra import new_stack, new_stack_text

        if locked.gguf is not None:
            locked = new_stack_text.with_exact_files(locked)
        return locked, new_stack.kubernetes_draft(request, locked)


TARGET = KubernetesTarget()
