"""Reading an input's annotation: its known type, its hints, its one declared default."""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ForwardRef,
    NotRequired,
    Required,
    Union,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

import pulumi

# typing's own is_typeddict misses typing_extensions' TypedDict (the fetcher's ModelFile).
from typing_extensions import is_typeddict

from components.validation_problems import T

# typing's own is_typeddict misses typing_extensions' TypedDict (the fetcher's ModelFile).


@dataclass(frozen=True, eq=False)
class Default:
    """An optional input's default, as metadata of its annotation (the one place it is stated).

    `checked_inputs` fills it in when the input is absent; help() and the schema show it.
    """

    value: Any


def default_of(annotation: Any) -> Default | None:
    """The `Default` of a field's annotation (outside any `pulumi.Input`), or None."""
    annotation = unwrapped(annotation)
    if get_origin(annotation) is Annotated:
        for item in get_args(annotation)[1:]:
            if isinstance(item, Default):
                return item
    return None


@functools.cache
def declared_defaults(args_type: type) -> dict[str, Any]:
    """The declared default of each optional input of a TypedDict of inputs, by field."""
    defaults: dict[str, Any] = {}
    for key, hint in type_hints(args_type).items():
        default = default_of(hint)
        if default is not None:
            if key in getattr(args_type, "__required_keys__", frozenset()):
                raise TypeError(f"{args_type.__name__}.{key} is required: it has no default")
            defaults[key] = default.value
    return defaults


def _plain_type(annotation: Any) -> Any:
    """The type of a known value, without Annotated, and without None when that is optional."""
    annotation = known_type(annotation)
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [m for m in get_args(annotation) if m is not type(None)]
        annotation = members[0] if len(members) == 1 else Any
    return annotation


def with_defaults(value: T, annotation: Any) -> T:
    """`value` with the declared default of every absent optional input filled in, in nested
    TypedDicts too (each list item, each dict value); outputs are left as they are (their
    resolved values are filled by `checked_inputs`). A new value: `value` is not changed."""
    annotation = _plain_type(annotation)
    if is_typeddict(annotation) and isinstance(value, dict):
        hints = type_hints(annotation)
        filled = {key: with_defaults(item, hints.get(key, Any)) for key, item in value.items()}
        for key, default in declared_defaults(annotation).items():
            if key not in filled:
                filled[key] = with_defaults(copy.deepcopy(default), hints[key])
        return filled  # type: ignore[return-value]
    if get_origin(annotation) is list and isinstance(value, list):
        (item_type,) = get_args(annotation)
        return [with_defaults(item, item_type) for item in value]  # type: ignore[return-value]
    if get_origin(annotation) is dict and isinstance(value, dict):
        item_type = get_args(annotation)[1]
        return {key: with_defaults(item, item_type) for key, item in value.items()}  # type: ignore[return-value]
    return value


def unwrapped(annotation: Any) -> Any:
    """The annotation without NotRequired and Required."""
    while get_origin(annotation) in (NotRequired, Required):
        (annotation,) = get_args(annotation)
    return annotation


def is_input(annotation: Any) -> bool:
    """True for `pulumi.Input[X]`: a union with an Output or an Awaitable member."""
    return get_origin(annotation) in (Union, types.UnionType) and any(
        get_origin(member) in (Awaitable, pulumi.Output) or member is pulumi.Output
        for member in get_args(annotation)
    )


def known_type(annotation: Any) -> Any:
    """The type of a known value: without NotRequired and `pulumi.Input[...]`."""
    annotation = unwrapped(annotation)
    if get_origin(annotation) is Annotated and is_input(get_args(annotation)[0]):
        annotation = get_args(annotation)[0]  # `Annotated[Input[X], Default(...)]`
    if is_input(annotation):
        members = [
            member
            for member in get_args(annotation)
            if get_origin(member) not in (Awaitable, pulumi.Output)
            and member is not pulumi.Output
            and not isinstance(member, ForwardRef)
        ]
        annotation = Union[tuple(members)] if len(members) > 1 else members[0]  # noqa: UP007
    return annotation


@functools.cache
def type_hints(typed_dict: type) -> dict[str, Any]:
    """A TypedDict's field annotations, with their metadata."""
    # `pulumi.Input[X]` names `Output` as a forward reference.
    return get_type_hints(
        typed_dict, localns={"Output": pulumi.Output, "T": Any}, include_extras=True
    )


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
