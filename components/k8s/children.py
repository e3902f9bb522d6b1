"""What every component does with its inputs and for its children.

Inputs may reach a component as plain values (a Python program), as outputs of other resources,
or over Pulumi's provider protocol, where every number is a double and any value may be unknown
at preview. The helpers here make the builders see one thing: typed, known values.
"""

from typing import Any, TypeVar

import pulumi

T = TypeVar("T")


def inherited_dependencies(opts: pulumi.ResourceOptions | None) -> list[pulumi.Resource]:
    """The component's own dependsOn, for its children: Pulumi does not pass it down."""
    depends = opts.depends_on if opts else None
    if depends is None:
        return []
    if isinstance(depends, pulumi.Resource):
        return [depends]
    return list(depends)  # type: ignore[arg-type]


def manifest_args(manifest: pulumi.Output[dict[str, Any]], *fields: str) -> dict[str, Any]:
    """Resource arguments from a manifest built from inputs: each top-level field an output.

    The builders take known values, so a manifest that needs an input (a namespace, a claim
    name) is built in an apply; the resource then waits for, and depends on, those inputs.
    """

    def field_of(key: str) -> pulumi.Output[Any]:
        return manifest.apply(lambda built: built[key])

    return {field: field_of(field) for field in fields}


def after(resource: pulumi.Resource, value: T) -> pulumi.Output[T]:
    """`value` as an output of `resource`: whoever uses it depends on (and waits for) it."""
    return resource.urn.apply(lambda _: value)
