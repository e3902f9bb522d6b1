"""Shared fixtures: the project's stack files and a render helper."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import FleetStack, KubernetesStack, StackConfig, parse_stack
from infra.lock import ModelSource, model_source

ROOT = Path(__file__).resolve().parent.parent
STACKS = ROOT / "stacks"


def stack_values(stack: str) -> dict[str, Any]:
    """The `llm-infra:` config values of a stack file, namespace stripped."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}


@pytest.fixture
def strix_halo_values() -> dict[str, Any]:
    """A fresh, mutable copy of the strix-halo stack's config values."""
    return copy.deepcopy(stack_values("strix-halo"))


def unlocked_source(stack: StackConfig) -> ModelSource:
    """The model as the config names it, without a lock (what a preview deploys)."""
    model = stack.servers[0].model if isinstance(stack, FleetStack) else stack.model
    return model_source(model, ROOT / "stacks" / "no-such.lock.json", preview=True)


def strix(values: dict[str, Any]) -> KubernetesStack:
    """Validate kubernetes-target values (as `parse_stack`), typed as that target's model."""
    stack = parse_stack(values)
    assert isinstance(stack, KubernetesStack)
    return stack
