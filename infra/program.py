"""The program: config → validation → model lock → memory plan → target wiring → components."""

from __future__ import annotations

import pulumi

from infra.config import (
    ConfigError,
    FleetStack,
    Mi300xStack,
    StrixHaloStack,
    expectations_path_for,
    load_stack_config,
)
from infra.lock import stack_model_sources
from infra.plan.stack import fleet_probe_problems, llamacpp_inputs, probe_problems, stack_plan
from infra.targets import docker_host, kubernetes


def main() -> None:
    """Validate the stack's config, lock and memory plan, then create its resources.

    Every check runs before the first resource exists, so a bad stack creates nothing.
    """
    stack, lock_path, secrets = load_stack_config()
    sources = stack_model_sources(stack, lock_path, preview=pulumi.runtime.is_dry_run())
    plan = stack_plan(stack, sources)
    problems = list(plan.problems) if stack.memory.check else []
    if isinstance(stack, StrixHaloStack):
        problems += probe_problems(stack, llamacpp_inputs(stack, sources[0]))
    elif isinstance(stack, FleetStack):
        problems += fleet_probe_problems(stack, sources)
    if problems:
        raise ConfigError(problems)
    expectations = None
    if not isinstance(stack, FleetStack) and stack.server.verify_after_up:
        expect = expectations_path_for(lock_path)
        if not expect.is_file():
            raise ConfigError(
                [
                    f"server.verifyAfterUp: true, but there are no expectations {expect} "
                    "(record them: llm-infra verify STACK --url URL --record)"
                ]
            )
        expectations = expect.read_text()
    if isinstance(stack, Mi300xStack):
        docker_host.deploy(stack, sources[0], secrets, expectations)
    else:
        kubernetes.deploy(stack, sources, secrets, expectations)
    pulumi.export("plan", plan.to_json())
