"""The program: config → validation → model lock → memory plan → target wiring → components."""

from __future__ import annotations

from pathlib import Path

import pulumi

from components.validation import ComponentInputError
from infra.config import (
    ConfigError,
    FleetStack,
    Mi300xStack,
    StackConfig,
    StrixHaloStack,
    expectations_path_for,
    load_stack_config,
)
from infra.config.inputs import stack_problems
from infra.lock import stack_model_sources
from infra.plan.stack import fleet_probe_problems, llamacpp_inputs, probe_problems, stack_plan
from infra.targets import docker_host, kubernetes
from infra.tune import with_tuned_runtimes


def main() -> None:
    """Validate the stack's config, lock and memory plan, then create its resources.

    Every check runs before the first resource exists, so a bad stack creates nothing.
    """
    stack, lock_path, secrets = load_stack_config()
    # `server.runtime: tuned`: the winner pinned beside the lock (STACK.tune.json).
    stack = with_tuned_runtimes(stack, lock_path)
    sources = stack_model_sources(stack, lock_path, preview=pulumi.runtime.is_dry_run())
    keys = (
        [f"servers[{i}].model" for i in range(len(stack.servers))]
        if isinstance(stack, FleetStack)
        else ["model"]
    )
    for key, source in zip(keys, sources, strict=True):
        if not source.locked:
            pulumi.log.warn(
                f"{key}: unlocked (revision {source.revision!r} is not pinned to a commit, sizes "
                "and sha256): run `llm-infra lock STACK` and commit the lock; `pulumi up` "
                "refuses an unlocked model"
            )
    plan = stack_plan(stack, sources)
    problems = list(plan.problems) if stack.memory.check else []
    if isinstance(stack, StrixHaloStack):
        problems += probe_problems(stack, llamacpp_inputs(stack, sources[0]))
    elif isinstance(stack, FleetStack):
        problems += fleet_probe_problems(stack, sources)
    if problems:
        raise ConfigError(problems)
    expectations = verify_expectations(stack, lock_path)
    try:
        if isinstance(stack, Mi300xStack):
            docker_host.deploy(stack, sources[0], secrets, expectations[0])
        else:
            kubernetes.deploy(stack, sources, secrets, expectations)
    except ComponentInputError as exc:
        # The components' own checks, reported under the stack file's keys.
        raise ConfigError(stack_problems(exc)) from None
    pulumi.export("plan", plan.to_json())


def verify_expectations(stack: StackConfig, lock_path: Path) -> list[str | None]:
    """Per server, the expectations its post-up check verifies (None: no check).

    A single server reads `STACK.verify.json`; each server of a fleet its own
    `STACK.SERVER.verify.json` (replicas of one alias are each checked). A server that asks
    for the check without a recorded file is an error before any resource exists.
    """
    servers: list[tuple[str, bool, str | None]]
    if isinstance(stack, FleetStack):
        servers = [
            (f"servers[{i}].verifyAfterUp", s.server.verify_after_up, s.server.resource_name)
            for i, s in enumerate(stack.server_stacks())
        ]
    else:
        servers = [("server.verifyAfterUp", stack.server.verify_after_up, None)]
    texts: list[str | None] = []
    problems = []
    for key, wanted, name in servers:
        expect = expectations_path_for(lock_path, name)
        if not wanted:
            texts.append(None)
        elif expect.is_file():
            texts.append(expect.read_text())
        else:
            texts.append(None)
            record = "llm-infra verify STACK" + (f" --server {name}" if name else "")
            problems.append(
                f"{key}: true, but there are no expectations {expect} "
                f"(record them: {record} --url URL --record)"
            )
    if problems:
        raise ConfigError(problems)
    return texts
