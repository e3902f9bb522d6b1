"""The program: config → validation → model lock → memory plan → target wiring → components."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pulumi

from components.validation import ComponentInputError
from infra.config import ConfigError, StackConfig, expectations_path_for, load_stack_config
from infra.config.inputs import stack_problems
from infra.config.stack import ServerStack
from infra.lock import stack_model_sources
from infra.targets.registry import stack_plan, target_of, with_tuned_runtimes


def main() -> None:
    """Validate the stack's config, lock and memory plan, then create its resources.

    Every check runs before the first resource exists, so a bad stack creates nothing.
    """
    stack, lock_path, secrets = load_stack_config()
    # `server.runtime: tuned`: the winner pinned beside the lock (STACK.tune.json).
    stack = with_tuned_runtimes(stack, lock_path)
    sources = stack_model_sources(stack, lock_path, preview=pulumi.runtime.is_dry_run())
    target = target_of(stack)
    for index, source in enumerate(sources):
        key = stack.model_key(index)
        if not source.locked:
            pulumi.log.warn(
                f"{key}: unlocked (revision {source.revision!r} is not pinned to a commit, sizes "
                "and sha256): run `llm-infra lock STACK` and commit the lock; `pulumi up` "
                "refuses an unlocked model"
            )
    # The one plan of the program: its checks here, and the target deploys what it placed.
    plan = stack_plan(stack, sources)
    problems = list(plan.problems) if stack.memory.check else []
    problems += plan.probe_problems
    if problems:
        raise ConfigError(problems)
    expectations = verify_expectations(stack, lock_path)
    try:
        target.deploy(stack, sources, secrets, expectations, plan)
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
    singles: Sequence[ServerStack] = stack.server_stacks()
    servers = [
        (stack.server_key("server.verifyAfterUp", i), single.server.verify_after_up, name)
        for i, (single, name) in enumerate(zip(singles, stack.server_names(), strict=True))
    ]
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
