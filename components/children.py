"""What every component does for its children: inherited dependencies, manifests as kwargs."""

from typing import Any

import pulumi


def inherited_dependencies(opts: pulumi.ResourceOptions | None) -> list[pulumi.Resource]:
    """The component's own dependsOn, for its children: Pulumi does not pass it down."""
    depends = opts.depends_on if opts else None
    if depends is None:
        return []
    if isinstance(depends, pulumi.Resource):
        return [depends]
    return list(depends)  # type: ignore[arg-type]


def without_kind(manifest: dict[str, Any]) -> dict[str, Any]:
    """Resource kwargs from a manifest: the Pulumi type already fixes apiVersion and kind."""
    return {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
