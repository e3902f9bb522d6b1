"""The program: config → validation → model lock → memory plan → target wiring → components."""

from __future__ import annotations

import pulumi

from infra.config import ConfigError, StrixHaloStack, expectations_path_for, load_stack_config
from infra.lock import model_source
from infra.plan.stack import llamacpp_inputs, probe_problems, stack_plan
from infra.targets import docker_host, kubernetes


def main() -> None:
    """Validate the stack's config, lock and memory plan, then create its resources.

    Every check runs before the first resource exists, so a bad stack creates nothing.
    """
    stack, lock_path, secrets = load_stack_config()
    source = model_source(stack.model, lock_path, preview=pulumi.runtime.is_dry_run())
    plan = stack_plan(stack, source)
    problems = list(plan.problems) if stack.memory.check else []
    if isinstance(stack, StrixHaloStack):
        problems += probe_problems(stack, llamacpp_inputs(stack, source))
    if problems:
        raise ConfigError(problems)
    expectations = None
    if stack.server.verify_after_up:
        expect = expectations_path_for(lock_path)
        if not expect.is_file():
            raise ConfigError(
                [
                    f"server.verifyAfterUp: true, but there are no expectations {expect} "
                    "(record them: llm-infra verify STACK --url URL --record)"
                ]
            )
        expectations = expect.read_text()
    if isinstance(stack, StrixHaloStack):
        kubernetes.deploy(stack, source, secrets, expectations)
    else:
        docker_host.deploy(stack, source, secrets, expectations)
    pulumi.export("plan", plan.to_json())
