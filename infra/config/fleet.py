"""Config of a fleet: several llama.cpp servers in one kubernetes stack (`servers:`).

Each entry of `servers:` is a server (the keys of `server:`) with its own `model` and `store`
(and, optionally, its own `memory`); the stack's `kubernetes`, `network`, `memory`, `litellm` and
`metrics` apply to all. Every entry is checked as the single-server stack it amounts to, so the
rules live once (`infra.config.kubernetes`); its problems name the entry (`servers[1].gpuLayers`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field

from infra.config.base import stack_placement_problems
from infra.config.kubernetes import (
    ClusterStack,
    KubernetesStack,
    MemorySettings,
    ModelSettings,
    StoreSettings,
)
from infra.config.kubernetes_checks import cross_checks
from infra.config.server import ServerSettings


class FleetServerSettings(ServerSettings):
    """One server of a fleet: its flags, node, model and model volume."""

    model: ModelSettings
    """This server's GGUF model: repo, revision and files."""
    store: StoreSettings
    """This server's model volume and fetch Job."""
    memory: MemorySettings | None = None
    """This server's node, when it differs from the stack's `memory`."""


class FleetStack(ClusterStack):
    """Several llama.cpp servers on a Kubernetes cluster, each on its own node and volume."""

    kind: ClassVar[str] = "fleet"
    """Its entry in the table of targets (`infra.targets.registry.TARGETS`)."""

    servers: Annotated[list[FleetServerSettings], Field(min_length=1)]
    """The servers: each the keys of `server:`, with its own `model` and `store` (and,
    optionally, `memory`)."""

    def server_stacks(self) -> list[KubernetesStack]:
        """Each server as the single-server stack it amounts to (validated already)."""
        stacks = []
        for entry in self.servers:
            server = ServerSettings.model_construct(
                _fields_set=entry.model_fields_set - {"model", "store", "memory"},
                **{field: getattr(entry, field) for field in ServerSettings.model_fields},
            )
            stacks.append(
                KubernetesStack.model_construct(
                    target="kubernetes",
                    kubernetes=self.kubernetes,
                    network=self.network,
                    memory=entry.memory or self.memory,
                    litellm=self.litellm,
                    metrics=self.metrics,
                    model=entry.model,
                    store=entry.store,
                    server=server,
                )
            )
        return stacks

    def server_names(self) -> list[str | None]:
        """Each server's name in its records beside the lock (`STACK.SERVER.verify.json`)."""
        return [entry.resource_name for entry in self.servers]

    def server_key(self, problem: str, index: int) -> str:
        """A problem of server `index` under its entry's key (`servers[1].gpuLayers`)."""
        return entry_key(problem, index, self.servers[index].memory is not None)

    def model_key(self, index: int) -> str:
        """The stack file's key of server `index`'s model (`servers[1].model`)."""
        return f"servers[{index}].model"

    def lock_paths(self, stack_lock: Path) -> list[Path]:
        """Each server's lock: the stack's lock for the first server's model, and beside it
        `STACK.<server>.lock.json` for another model (servers with one model share its lock)."""
        base = stack_lock.name.removesuffix(".lock.json")
        first = _model_key(self.servers[0].model)
        owners: dict[tuple[object, ...], str] = {}
        paths = []
        for entry in self.servers:
            key = _model_key(entry.model)
            owner = owners.setdefault(key, entry.resource_name)
            paths.append(
                stack_lock if key == first else stack_lock.with_name(f"{base}.{owner}.lock.json")
            )
        return paths


def _model_key(model: ModelSettings) -> tuple[object, ...]:
    return (model.repo, model.revision, tuple(model.files))


_KEY = re.compile(r"(?<![\w.\[\]/-])(server|model|store|memory)\.(?=[a-zA-Z])")


def entry_key(problem: str, index: int, own_memory: bool) -> str:
    """A single-server problem (`server.gpuLayers: ...`) as the fleet entry's (`servers[1]...`)."""

    def rename(match: re.Match[str]) -> str:
        section = match[1]
        if section == "server":
            return f"servers[{index}]."
        if section == "memory" and not own_memory:
            return match[0]
        return f"servers[{index}].{section}."

    return _KEY.sub(rename, problem)


def fleet_checks(fleet: FleetStack) -> list[str]:
    """Each server's own rules, then the rules between servers."""
    problems: list[str] = []
    stacks = fleet.server_stacks()
    for index, (entry, stack) in enumerate(zip(fleet.servers, stacks, strict=True)):
        problems += [
            entry_key(p, index, entry.memory is not None)
            for p in dict.fromkeys(cross_checks(stack))
        ]
    names: dict[str, str] = {}
    stores: dict[str, int] = {}
    selectors: list[tuple[str, Mapping[str, str]]] = []
    aliases: dict[str, int] = {}
    for index, entry in enumerate(fleet.servers):
        key = f"servers[{index}]"
        for name, what in [
            (entry.resource_name, f"{key}.name" if entry.name else f"{key}.alias"),
            *[
                (worker, f"{key}.rpc.workers[{w}].name")
                for w, worker in enumerate(entry.rpc_worker_names)
            ],
        ]:
            if name in names:
                problems.append(
                    f"{what}: {name!r} is already the name of {names[name]} (each server and "
                    "worker names its own Deployment and Service; set a distinct name)"
                )
            else:
                names[name] = what
        if entry.store.name in stores:
            owner = stores[entry.store.name]
            problems.append(
                f"{key}.store.name: {entry.store.name!r} is already servers[{owner}]'s volume"
                " (each server has its own; local-path volumes are node-bound)"
            )
        else:
            stores[entry.store.name] = index
        selectors.append((f"{key}.nodeSelector", entry.node_selector))
        selectors += [
            (f"{key}.rpc.workers[{w}].nodeSelector", worker.node_selector)
            for w, worker in enumerate(entry.rpc.workers if entry.rpc else [])
        ]
        if entry.alias in aliases:
            other = fleet.servers[aliases[entry.alias]]
            if _model_key(other.model) != _model_key(entry.model):
                problems.append(
                    f"{key}.model: servers[{aliases[entry.alias]}] serves alias {entry.alias!r} "
                    "with another model; replicas of one alias must serve the same model "
                    "(LiteLLM balances requests between them)"
                )
        else:
            aliases[entry.alias] = index
    problems += stack_placement_problems(selectors)
    if fleet.network.node_port is not None and len(fleet.servers) > 1:
        problems.append(
            f"network.nodePort: {fleet.network.node_port} would be every server's, and a node "
            "port is one Service's: expose a fleet's servers through LiteLLM, or one server per "
            "stack"
        )
    # A stack-wide key (network.*, kubernetes.*) is checked with every server: say it once.
    return list(dict.fromkeys(problems))
