"""The program: config → validation → model lock → target wiring → components."""

from __future__ import annotations

import pulumi

from infra import kubernetes_target
from infra.config import load_stack_config
from infra.lock import model_source


def main() -> None:
    """Validate the stack's config and lock, then create its resources (none exists before)."""
    stack, lock_path, secrets = load_stack_config()
    source = model_source(stack.model, lock_path, preview=pulumi.runtime.is_dry_run())
    kubernetes_target.deploy(stack, source, secrets)
