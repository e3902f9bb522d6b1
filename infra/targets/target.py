"""What a target is: the `Target` core every target has, and the optional parts a target
implements only where it has them (`OneServer`, `SizesLlamaCpp`, `TunedRuntimes`, `Drafts`).

A target module (`infra/targets/<kind>_target.py`) names the parts its class has as its bases;
`infra.targets.registry` asks `isinstance(target, Part)` and answers a target without the part
with the error, or the default, the command gives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from infra.config import KubernetesStack, StackConfig, StackSecrets
from infra.lock import ModelSource
from infra.plan.report import Plan

if TYPE_CHECKING:
    from infra.lock import ModelLock
    from infra.new_stack import Draft, StackRequest
    from infra.new_stack_docker_host import CheckpointConfig

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
