"""The table of targets: what each kind of stack does, keyed as the stack file says it.

`target: kubernetes` (one llama.cpp server), `target: docker-host` (vLLM behind Caddy) and a
fleet (`target: kubernetes` with `servers:`) each have one `Target` in `TARGETS`; everything that
differs between them (the Pulumi program's part, the memory plan, the endpoint, the LiteLLM
route, the reference page) is a method of it. Callers ask `target_of(stack)`; no other module
switches on a stack's type (tests/unit/test_target_registry.py keeps it so). The target
modules (`kubernetes`, `docker_host`, `cluster`) are imported when a method needs them, so a
command that only plans never loads the Kubernetes provider.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from infra.config import (
    ConfigError,
    DockerHostStack,
    FleetStack,
    KubernetesStack,
    StackConfig,
    StackSecrets,
)
from infra.lock import ModelSource
from infra.plan.report import Plan

ONE_SERVER = (
    "servers: the stack has several servers, so it has no one URL or model name (pass --url "
    "and the model of one of them)"
)

S_contra = TypeVar("S_contra", contravariant=True)
Header = Mapping[str, Any] | None


class Target(Protocol[S_contra]):
    """What a target does with a validated stack of its kind."""

    kind: str
    """Its key in `TARGETS`: the stack file's `target` (`fleet`: kubernetes with servers:)."""

    def deploy(
        self,
        stack: S_contra,
        sources: list[ModelSource],
        secrets: StackSecrets,
        expectations: list[str | None],
        plan: Plan,
    ) -> None:
        """Create the stack's resources and export its outputs (inside a Pulumi program), from
        the plan the program made of them (a split model's `--tensor-split` is the plan's)."""
        ...

    def plan(self, stack: S_contra, sources: list[ModelSource], header: Header) -> Plan:
        """The stack's memory and disk budget (`header`: a GGUF header read instead of the
        lock's)."""
        ...

    def endpoint_url(self, stack: S_contra) -> str:
        """The base URL the stack serves (ConfigError for several servers)."""
        ...

    def model_name(self, stack: S_contra) -> str:
        """The model id clients send (ConfigError for several servers)."""
        ...

    def route(self, stack: S_contra) -> dict[str, Any]:
        """The stack's LiteLLM `model_list` entry (ConfigError for several servers)."""
        ...

    def server_props(self, stack: S_contra, source: ModelSource) -> dict[str, Any]:
        """What the stack's one server must report of itself (llama-server's /props, vLLM's
        /v1/models), from the inputs its render is made of."""
        ...

    def docs(
        self,
        stack: S_contra,
        sources: list[ModelSource],
        plan: Plan,
        name: str,
        picture: str | None,
    ) -> str:
        """The stack's reference page (`plan`: its plan; `picture`: its plan picture, relative
        to the page)."""
        ...

    def llamacpp_server(self, stack: S_contra) -> KubernetesStack | None:
        """The stack's one llama.cpp server: what `plan --suggest` sizes and `tune` bakes off
        (None: vLLM, or a fleet, whose servers are taken one at a time)."""
        ...

    def with_tuned(self, stack: S_contra, lock_path: Path) -> StackConfig:
        """The stack with each `server.runtime: tuned` replaced by its tune record's winner."""
        ...


class _OneServerTarget:
    """A target of one server: its module (`infra.targets.<module>`) gives the server's URL
    (kubernetes: the in-cluster Service's; docker-host: the public one Caddy serves) and the
    LiteLLM route of the model name to it."""

    module: str

    def _target_module(self) -> Any:
        return importlib.import_module(f"infra.targets.{self.module}")

    def endpoint_url(self, stack: Any) -> str:
        """The server's base URL."""
        return self._target_module().endpoint_url(stack)  # type: ignore[no-any-return]

    def route(self, stack: Any) -> dict[str, Any]:
        """The server's model name, routed to its URL."""
        target = self._target_module()
        return target.litellm_route(stack, target.endpoint_url(stack))  # type: ignore[no-any-return]


class KubernetesTarget(_OneServerTarget):
    """`target: kubernetes`: one llama.cpp server and its model store on a k3s node."""

    kind = "kubernetes"
    module = "kubernetes"

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

    def plan(self, stack: KubernetesStack, sources: list[ModelSource], header: Header) -> Plan:
        """llama.cpp's placement of the model over VRAM and RAM, and the volume."""
        from infra.plan.stack import llamacpp_plan

        return llamacpp_plan(stack, sources[0], header)

    def model_name(self, stack: KubernetesStack) -> str:
        """llama-server's `--alias`."""
        return stack.server.alias

    def server_props(self, stack: KubernetesStack, source: ModelSource) -> dict[str, Any]:
        """llama-server's `/props`, as the verify Job checks it."""
        from infra.targets import kubernetes

        return kubernetes.server_props(stack, source)

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

    def llamacpp_server(self, stack: KubernetesStack) -> KubernetesStack | None:
        """The stack's own server."""
        return stack

    def with_tuned(self, stack: KubernetesStack, lock_path: Path) -> StackConfig:
        """The server's tune record's winner, when its runtime is `tuned`."""
        from infra.tune import tuned_server

        return tuned_server(stack, lock_path)


class DockerHostTarget(_OneServerTarget):
    """`target: docker-host`: vLLM ROCm behind Caddy on one GPU host, over SSH."""

    kind = "docker-host"
    module = "docker_host"

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

    def plan(self, stack: DockerHostStack, sources: list[ModelSource], header: Header) -> Plan:
        """vLLM's HBM, the host's RAM (CPU KV tier) and disk (a GGUF header does not apply)."""
        from infra.plan.stack import vllm_plan

        return vllm_plan(stack, sources[0])

    def model_name(self, stack: DockerHostStack) -> str:
        """vLLM's `--served-model-name`."""
        return stack.server.served_model_name

    def server_props(self, stack: DockerHostStack, source: ModelSource) -> dict[str, Any]:
        """vLLM's `/v1/models` (vLLM has no /props)."""
        from infra.targets import docker_host

        return docker_host.server_props(stack)

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

    def llamacpp_server(self, stack: DockerHostStack) -> KubernetesStack | None:
        """None: vLLM's sizes are set by hand from the plan."""
        return None

    def with_tuned(self, stack: DockerHostStack, lock_path: Path) -> StackConfig:
        """The stack itself: vLLM has one runtime."""
        return stack


class FleetTarget:
    """A fleet: several llama.cpp servers on one cluster, each the kubernetes target's server."""

    kind = "fleet"

    def deploy(
        self,
        stack: FleetStack,
        sources: list[ModelSource],
        secrets: StackSecrets,
        expectations: list[str | None],
        plan: Plan,
    ) -> None:
        """Every server, with the fleet's outputs (`servers`, `litellmModelList`)."""
        from infra.targets import cluster

        cluster.deploy(stack, sources, secrets, plan, expectations, fleet=True)

    def plan(self, stack: FleetStack, sources: list[ModelSource], header: Header) -> Plan:
        """Every server's plan in one, its devices and lines named by server."""
        from infra.plan.stack import fleet_plan

        return fleet_plan(stack, sources, header)

    def endpoint_url(self, stack: FleetStack) -> str:
        """None: several servers (ConfigError)."""
        raise ConfigError([ONE_SERVER])

    def model_name(self, stack: FleetStack) -> str:
        """None: several servers (ConfigError)."""
        raise ConfigError([ONE_SERVER])

    def route(self, stack: FleetStack) -> dict[str, Any]:
        """None: several servers (ConfigError; `routes` has one per server)."""
        raise ConfigError([ONE_SERVER])

    def server_props(self, stack: FleetStack, source: ModelSource) -> dict[str, Any]:
        """None: several servers (ConfigError; ask for one server's)."""
        raise ConfigError([ONE_SERVER])

    def docs(
        self,
        stack: FleetStack,
        sources: list[ModelSource],
        plan: Plan,
        name: str,
        picture: str | None,
    ) -> str:
        """The plan picture once, then one section per server."""
        from infra.reference.page import fleet_page

        return fleet_page(stack, sources, plan, name, picture)

    def llamacpp_server(self, stack: FleetStack) -> KubernetesStack | None:
        """None: a fleet's servers are sized each by hand from the plan."""
        return None

    def with_tuned(self, stack: FleetStack, lock_path: Path) -> StackConfig:
        """Each server whose runtime is `tuned` with its own record's winner."""
        from infra.tune import tuned_fleet

        return tuned_fleet(stack, lock_path)


TARGETS: dict[str, Target[Any]] = {
    target.kind: target for target in (KubernetesTarget(), DockerHostTarget(), FleetTarget())
}
"""Every target, by the kind of stack it deploys (`StackConfig`'s models, `kind`)."""


def target_of(stack: StackConfig) -> Target[Any]:
    """The target that deploys `stack`."""
    return TARGETS[stack.kind]


def with_tuned_runtimes(stack: StackConfig, lock_path: Path) -> StackConfig:
    """The stack with each `server.runtime: tuned` replaced by its tune record's winner, which
    must pass the checks of a runtime named in the stack file; ConfigError otherwise."""
    return target_of(stack).with_tuned(stack, lock_path)


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
    return target_of(stack).endpoint_url(stack)


def model_name(stack: StackConfig) -> str:
    """The model id clients send (and `/v1/models` lists)."""
    return target_of(stack).model_name(stack)


def route(stack: StackConfig) -> dict[str, Any]:
    """The stack's LiteLLM `model_list` entry, as its `litellmModel` output shows it."""
    return target_of(stack).route(stack)


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
