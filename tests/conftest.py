"""Shared fixtures: the project's stack files and a render helper."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

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
