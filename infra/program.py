"""The program: config → validation → target wiring → components."""

from __future__ import annotations

from infra import kubernetes_target
from infra.config import load_stack_config


def main() -> None:
    """Validate the stack's config, then create its resources (nothing exists before validation)."""
    stack, hf_token = load_stack_config()
    kubernetes_target.deploy(stack, hf_token)
