"""What every component does with its inputs and for its children.

Inputs may reach a component as plain values (a Python program), as outputs of other resources,
or over Pulumi's provider protocol, where every number is a double and any value may be unknown
at preview. The helpers here make the builders see one thing: typed, known values.
"""

import types
from collections.abc import Awaitable
from typing import (
    Annotated,
    Any,
    ForwardRef,
    NotRequired,
    Required,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
)

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


def with_integers(value: T, annotation: Any, where: str = "args") -> T:
    """`value` with every number its annotation types as `int` made an int.

    The provider protocol carries numbers as doubles and the SDK's component provider hands them
    on as floats (`8080.0`); a builder must see `8080` whichever way the value came. A float
    that is not a whole number where an int is declared is an error naming the field.
    """
    if isinstance(value, pulumi.Output):
        return cast(T, value.apply(lambda resolved: with_integers(resolved, annotation, where)))
    annotation = _value_type(annotation)
    if annotation is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{where}: {value!r} is not a whole number")
            return cast(T, int(value))
        return value
    fields = getattr(annotation, "__annotations__", None)
    if isinstance(value, dict):
        if fields is not None and hasattr(annotation, "__required_keys__"):
            return cast(
                T,
                {
                    key: with_integers(item, fields[key], f"{where}.{key}")
                    if key in fields
                    else item
                    for key, item in value.items()
                },
            )
        if get_origin(annotation) is dict:
            item_type = get_args(annotation)[1]
            return cast(
                T, {k: with_integers(v, item_type, f"{where}.{k}") for k, v in value.items()}
            )
    if isinstance(value, list) and get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        return cast(T, [with_integers(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)])
    return value


def _value_type(annotation: Any) -> Any:
    """The type of a known value under NotRequired, `| None` and `pulumi.Input[...]`."""
    while get_origin(annotation) in (NotRequired, Required, Annotated):
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        known = [
            member
            for member in get_args(annotation)
            if member is not type(None)
            and not isinstance(member, ForwardRef)
            and get_origin(member) not in (Awaitable, pulumi.Output)
        ]
        return _value_type(known[0]) if len(known) == 1 else Any
    return annotation


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
