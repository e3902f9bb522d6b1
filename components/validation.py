"""One check of a component's inputs, derived from its Args type, run in its constructor.

The Args types are TypedDicts (the SDK's schema inference reads them), their fields typed with
the grammars of `components.grammars` (`Annotated`) and enums as `Literal`. From each one a
pydantic model is made mechanically: unknown keys refused, strict types (no bool or string as
a number), ranges, enums and grammars checked. Rules that span fields register with
`cross_field_rule`. A problem names the input as a Python caller writes it
(`caddy.allowed_cidrs[0]`); the provider names it as the engine sent it (`caddy.allowedCidrs[0]`).

Inputs that are outputs of other resources are checked when they resolve, with the same message.

An optional input's default is declared once, in its annotation: `Default(value)` beside the
grammar (`NotRequired[Annotated[int, Field(ge=1), Default(DEFAULT_UID)]]`). `checked_inputs`
returns the args with every declared default filled in, nested types too, so the components
read `args["key"]`; help() and the provider schema show the same value. An input without a
`Default` stays absent when not given (None-able inputs: absent means None).

This module makes the model and runs the check (the rest is re-exported here): problems and
their names are `components.validation_problems`'s, annotations and their defaults
`components.validation_annotations`'s, help() `components.validation_docs`'s.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pulumi
from pulumi.output import Unknown
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    WrapValidator,
    create_model,
)
from pydantic_core import PydanticUndefined

# typing's own is_typeddict misses typing_extensions' TypedDict (the fetcher's ModelFile).
from typing_extensions import is_typeddict

from components.validation_annotations import (
    Default,
    _plain_type,
    declared_defaults,
    is_input,
    known_type,
    type_hints,
    unwrapped,
    with_defaults,
    with_integers,
)
from components.validation_docs import INPUTS_HEADING, documented
from components.validation_problems import (
    CROSS_FIELD_RULES,
    SCHEMA_NAMES,
    ComponentInputError,
    Input,
    Location,
    Problem,
    Rule,
    T,
    _rebased,
    cross_field_rule,
    error_messages,
    named,
    ref,
    schema_path,
    shown,
    snake_path,
)

__all__ = [
    "INPUTS_HEADING",
    "SCHEMA_NAMES",
    "ComponentInputError",
    "Default",
    "Input",
    "Location",
    "Problem",
    "Rule",
    "T",
    "cross_field_rule",
    "declared_defaults",
    "documented",
    "error_messages",
    "known_type",
    "named",
    "ref",
    "schema_path",
    "shown",
    "snake_path",
    "with_defaults",
]


class _Pending:
    """Stands in, during the check, for a value not known yet (checked when it resolves)."""


_PENDING = _Pending()


def _pending_or(value: Any, handler: Callable[[Any], Any]) -> Any:
    return value if value is _PENDING else handler(value)


_MAYBE_PENDING = WrapValidator(_pending_or)
_STRICT: dict[Any, Any] = {int: StrictInt, float: StrictFloat, bool: StrictBool, str: StrictStr}


def _model_type(annotation: Any) -> Any:
    """The pydantic type that checks a known value of `annotation`."""
    annotation = unwrapped(annotation)
    if is_input(annotation):
        return Annotated[_model_type(known_type(annotation)), _MAYBE_PENDING]
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        return Annotated[(_model_type(inner), *metadata)]
    if origin in (Union, types.UnionType):
        return Union[tuple(_model_type(member) for member in get_args(annotation))]  # noqa: UP007
    if origin is list:
        (item,) = get_args(annotation)
        return list[_model_type(item)]  # type: ignore[misc]
    if origin is dict:
        key, value = get_args(annotation)
        return dict[_model_type(key), _model_type(value)]  # type: ignore[misc]
    if origin is Literal or annotation is Any or annotation is type(None):
        return annotation
    if is_typeddict(annotation):
        return input_model(annotation)
    return _STRICT.get(annotation, annotation)


@functools.cache
def input_model(args_type: type) -> type[BaseModel]:
    """The pydantic model of a TypedDict of inputs (cached; made once per type)."""
    hints = type_hints(args_type)
    required: frozenset[str] = getattr(args_type, "__required_keys__", frozenset())
    fields: dict[str, Any] = {
        # Any input may be another resource's output: checked when it resolves.
        key: (
            Annotated[_model_type(hint), _MAYBE_PENDING],
            Field(PydanticUndefined if key in required else None),
        )
        for key, hint in hints.items()
    }
    return create_model(
        args_type.__name__,
        __config__=ConfigDict(
            extra="forbid", strict=True, arbitrary_types_allowed=True, allow_inf_nan=False
        ),
        **fields,
    )


def _stand_ins(value: Any) -> Any:
    """`value` with every output and unknown replaced by the pending marker."""
    if isinstance(value, pulumi.Output | Unknown):
        return _PENDING
    if isinstance(value, dict):
        return {key: _stand_ins(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_stand_ins(item) for item in value]
    return value


def _rule_problems(value: Any, annotation: Any, loc: Location) -> list[Problem]:
    """The cross-field rules of every known TypedDict in `value`, located under `loc`."""
    annotation = _plain_type(annotation)
    if not isinstance(value, dict | list):
        return []
    problems: list[Problem] = []
    if is_typeddict(annotation) and isinstance(value, dict):
        hints = type_hints(annotation)
        for key, item in value.items():
            if key in hints:
                problems += _rule_problems(item, hints[key], (*loc, key))
        for rule in CROSS_FIELD_RULES.get(annotation, []):
            problems += [((*loc, *where), _rebased(message, loc)) for where, message in rule(value)]
    elif get_origin(annotation) is list and isinstance(value, list):
        (item_type,) = get_args(annotation)
        for index, item in enumerate(value):
            problems += _rule_problems(item, item_type, (*loc, index))
    elif get_origin(annotation) is dict and isinstance(value, dict):
        item_type = get_args(annotation)[1]
        for key, item in value.items():
            problems += _rule_problems(item, item_type, (*loc, key))
    return problems


def input_problems(value: Any, annotation: Any, loc: Location = ()) -> list[Problem]:
    """Every problem of a known value of `annotation` (outputs inside it are not checked)."""
    model_type = _model_type(annotation)
    candidate = _stand_ins(value)
    try:
        if isinstance(model_type, type) and issubclass(model_type, BaseModel):
            model_type.model_validate(candidate)
        else:
            _adapter(annotation).validate_python(candidate)
    except ValidationError as error:
        return [((*loc, *where), message) for where, message in error_messages(error)]
    # The rules read the inputs as the components do: with their defaults.
    return _rule_problems(with_defaults(value, annotation), annotation, loc)


@functools.cache
def _adapter(annotation: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(
        _model_type(annotation),
        config=ConfigDict(strict=True, arbitrary_types_allowed=True, allow_inf_nan=False),
    )


def _deferred(value: Any, annotation: Any, loc: Location, component: str, name: str) -> Any:
    """`value` with each output wrapped to check its resolved value as a known input."""
    annotation = unwrapped(annotation)
    if isinstance(value, pulumi.Output):
        declared = known_type(annotation)

        def check(resolved: Any) -> Any:
            problems = input_problems(resolved, declared, loc)
            if problems:
                raise ComponentInputError(component, name, problems)
            return _deferred(with_defaults(resolved, declared), declared, loc, component, name)

        return value.apply(check)
    annotation = _plain_type(annotation)
    if is_typeddict(annotation) and isinstance(value, dict):
        hints = type_hints(annotation)
        return {
            key: _deferred(item, hints.get(key, Any), (*loc, key), component, name)
            for key, item in value.items()
        }
    if get_origin(annotation) is list and isinstance(value, list):
        (item_type,) = get_args(annotation)
        return [
            _deferred(item, item_type, (*loc, index), component, name)
            for index, item in enumerate(value)
        ]
    if get_origin(annotation) is dict and isinstance(value, dict):
        item_type = get_args(annotation)[1]
        return {
            key: _deferred(item, item_type, (*loc, key), component, name)
            for key, item in value.items()
        }
    return value


def checked_inputs(component: str, name: str, args: T, args_type: type) -> T:
    """`args` checked against `args_type` before any child exists; outputs checked on resolving.

    Raises ComponentInputError naming every problem. Returns the args with every declared
    default filled in (`with_defaults`), and each output input wrapped so that its resolved
    value gets the same check and its defaults.
    """
    args = with_integers(args, args_type)
    if not isinstance(args, dict):
        raise ComponentInputError(
            component, name, [((), f"args must be a dict of inputs, not {type(args).__name__}")]
        )
    problems = input_problems(args, args_type)
    if problems:
        raise ComponentInputError(component, name, problems)
    return _deferred(with_defaults(args, args_type), args_type, (), component, name)  # type: ignore[no-any-return]
