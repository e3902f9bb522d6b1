"""A fleet: several llama.cpp servers on one cluster (`target: kubernetes` with `servers:`).

Its entry in the table of targets (`infra.targets.registry.TARGETS`): the core (deploy, plan,
reference page) and tuned runtimes, and nothing else. It has no one URL, model name, route or
server properties (the registry answers those with `ONE_SERVER`; `verify` and `bench` take one
server with `--server`), no one server for `plan --suggest` or `tune` (each server is sized by
hand from the plan, and tuned with `--server`), and `init` drafts no fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.config import FleetStack, StackConfig, StackSecrets
from infra.lock import ModelSource
from infra.plan.report import Plan
from infra.targets.target import Target, TunedRuntimes


class FleetTarget(Target[FleetStack], TunedRuntimes[FleetStack]):
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

    def plan(
        self, stack: FleetStack, sources: list[ModelSource], header: Mapping[str, Any] | None
    ) -> Plan:
        """Every server's plan in one, its devices and lines named by server."""
        from infra.plan.stack import fleet_plan

        return fleet_plan(stack, sources, header)

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

    # Tuned runtimes.

    def with_tuned(self, stack: FleetStack, lock_path: Path) -> StackConfig:
        """Each server whose runtime is `tuned` with its own record's winner."""
        from infra.tune import tuned_fleet

        return tuned_fleet(stack, lock_path)


TARGET = FleetTarget()
