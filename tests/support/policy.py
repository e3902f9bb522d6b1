"""The policy pack's tests' renders and helpers: fresh renders of both stacks, what the pack
reports for them, and what the Pulumi engine hands a resource policy."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import PolicyResourceOptions, ResourceValidationArgs
from pulumi_policy.policy import PolicyCustomTimeouts

import policy.__main__ as pack
from policy import validators
from tests.support.render import rendered_stack

Render = tuple[list[dict[str, Any]], dict[str, str]]
"""A render as the pack reads it: resources.json and the host files by remote path."""


@pytest.fixture(scope="module")
def render_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fresh renders of both stacks (rendered once per module: ~1.5 s each)."""
    base = tmp_path_factory.mktemp("renders")
    return {stack: rendered_stack(stack, base) for stack in ("strix-halo", "mi300x")}


@pytest.fixture
def strix_render(render_dirs: dict[str, Path]) -> Render:
    """A mutable copy of the strix-halo render."""
    resources, files = validators.load_render(render_dirs["strix-halo"])
    return copy.deepcopy(resources), files


@pytest.fixture
def mi300x_render(render_dirs: dict[str, Path]) -> Render:
    """A mutable copy of the mi300x render."""
    resources, files = validators.load_render(render_dirs["mi300x"])
    return copy.deepcopy(resources), files


def named(resources: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    """The one resource whose name ends with suffix."""
    (found,) = [r for r in resources if r["name"].endswith(suffix)]
    return found


def server_container(resources: list[dict[str, Any]]) -> dict[str, Any]:
    """The llama-server container of the strix-halo Deployment."""
    spec = named(resources, "-deployment")["inputs"]["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "llama-server"]
    return container  # type: ignore[no-any-return]


def edited(files: dict[str, str], path: str, old: str, new: str) -> None:
    """Rewrite `old` as `new` in the rendered file at `path` (which must hold `old`)."""
    assert old in files[path], (path, old)
    files[path] = files[path].replace(old, new)


def messages(resources: list[dict[str, Any]], files: dict[str, str], **options: Any) -> list[str]:
    """Every violation as `[policy] resource: message`."""
    return [str(v) for v in validators.check_resources(resources, files, **options)]


def policy_args(
    resource_type: str, props: dict[str, Any], protect: bool = False, **config: Any
) -> ResourceValidationArgs:
    """What the Pulumi engine hands a resource policy."""
    options = PolicyResourceOptions(
        protect=protect, ignore_changes=[], delete_before_replace=None, aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[],
    )  # fmt: skip
    urn = f"urn:pulumi:dev::llm-infra::{resource_type}::r"
    return ResourceValidationArgs(resource_type, props, urn, "r", options, None, config)


def run_policy(name: str, args: ResourceValidationArgs) -> list[str]:
    """Messages the named policy of the pack reports for args."""
    (found,) = [p for p in pack.policies() if p.name == name]
    reported: list[str] = []

    def report(message: str, urn: str | None = None) -> None:
        reported.append(message)

    found.validate(args, report)
    return reported


def caddy_messages(mi300x_render: Render, caddyfile: str) -> list[str]:
    """The caddy-allowlist rule's messages for the mi300x render with this Caddyfile."""
    resources, files = mi300x_render
    return [
        m
        for m in messages(resources, {**files, "/opt/llm/Caddyfile": caddyfile})
        if m.startswith("[caddy-allowlist]")
    ]
