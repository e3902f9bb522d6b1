"""The table of targets: what each kind of stack does, keyed as the stack file says it.

`target: kubernetes` (one llama.cpp server), `target: docker-host` (vLLM behind Caddy) and a
fleet (`target: kubernetes` with `servers:`) each have one target module
(`kubernetes_target`, `docker_host_target`, `fleet_target`) whose class is its entry in
`TARGETS`. Every target has the `Target` core (deploy, plan, reference page); the optional parts
(`OneServer`, `SizesLlamaCpp`, `TunedRuntimes`, `Drafts`) are Protocols a target implements only
where it has them, and callers ask for a part through this module, which answers a target
without it with the error (or the default) the command gives. Callers ask `target_of(stack)`;
no other module switches on a stack's type (tests/unit/test_target_registry.py keeps it so),
and the lists of targets elsewhere (`init --target`) are read from `TARGETS`. A target module
imports its wiring (`kubernetes`, `docker_host`, `cluster`) when a method needs it, so a
command that only plans never loads the Kubernetes provider.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from infra.config import ConfigError, KubernetesStack, StackConfig, StackSecrets
from infra.lock import ModelSource
from infra.plan.report import Plan
from infra.targets.docker_host_target import DockerHostTarget
from infra.targets.fleet_target import FleetTarget
from infra.targets.kubernetes_target import KubernetesTarget

if TYPE_CHECKING:
    from infra.lock import ModelLock
    from infra.new_stack import Draft, StackRequest
    from infra.new_stack_docker_host import CheckpointConfig

ONE_SERVER = (
    "servers: the stack has several servers, so it has no one URL or model name (pass --url "
    "and the model of one of them)"
)

S_contra = TypeVar("S_contra", contravariant=True)
Header = Mapping[str, Any] | None


class Target(Protocol[S_contra]):
    """What every target does with a validated stack of its kind."""

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


@runtime_checkable
class OneServer(Protocol[S_contra]):
    """The part of a target whose stack is one server: one URL, one model name, one route."""

    def endpoint_url(self, stack: S_contra) -> str:
        """The base URL the stack serves."""
        ...

    def model_name(self, stack: S_contra) -> str:
        """The model id clients send."""
        ...

    def route(self, stack: S_contra) -> dict[str, Any]:
        """The stack's LiteLLM `model_list` entry."""
        ...

    def server_props(self, stack: S_contra, source: ModelSource) -> dict[str, Any]:
        """What the stack's one server must report of itself (llama-server's /props, vLLM's
        /v1/models), from the inputs its render is made of."""
        ...


@runtime_checkable
class SizesLlamaCpp(Protocol[S_contra]):
    """The part of a target whose stack is one llama.cpp server: what `plan --suggest` sizes
    and `tune` bakes off."""

    def llamacpp_server(self, stack: S_contra) -> KubernetesStack:
        """The stack's one llama.cpp server."""
        ...


@runtime_checkable
class TunedRuntimes(Protocol[S_contra]):
    """The part of a target whose servers may run `server.runtime: tuned`."""

    def with_tuned(self, stack: S_contra, lock_path: Path) -> StackConfig:
        """The stack with each `server.runtime: tuned` replaced by its tune record's winner."""
        ...


@runtime_checkable
class Drafts(Protocol):
    """The part of a target `llm-infra init` drafts a new stack for (`--target KIND`)."""

    def option_problems(self, request: StackRequest) -> list[str]:
        """init's options that this target does not take, before anything is fetched."""
        ...

    def check_request(self, request: StackRequest) -> None:
        """ConfigError for what the request lacks, before the hub is asked."""
        ...

    def draft(
        self,
        request: StackRequest,
        locked: ModelLock,
        config_json: Callable[[], CheckpointConfig],
    ) -> tuple[ModelLock, Draft]:
        """The lock as the stack names its files, and the drafted stack (`config_json`: reads
        a safetensors checkpoint's config.json at the locked commit)."""
        ...


TARGETS: dict[str, Target[Any]] = {
    target.kind: target for target in (KubernetesTarget(), DockerHostTarget(), FleetTarget())
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
