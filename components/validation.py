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
"""

from __future__ import annotations

import copy
import functools
import json
import types
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ForwardRef,
    Literal,
    NotRequired,
    Required,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import pulumi
from pulumi.output import Unknown
from pulumi.provider.experimental.util import camel_case
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

from components.k8s.children import with_integers

T = TypeVar("T")
Input = Union[T, Awaitable[T], pulumi.Output[T]]  # noqa: UP007
"""`pulumi.Input[T]` without its forward reference, so `typing.get_type_hints` resolves the
Args types (the SDK's analyzer reads both alike)."""
Location = tuple[str | int, ...]
Problem = tuple[Location, str]
Rule = Callable[[Mapping[str, Any]], list[Problem]]

_RULES: dict[type, list[Rule]] = {}


SCHEMA_NAMES: ContextVar[bool] = ContextVar("SCHEMA_NAMES", default=False)
"""True while the provider constructs a component (and in the applies it starts): problems
then name inputs as the engine sent them, in camelCase."""


_REF = "\x1f"
"""Brackets another input's location inside a problem's message (`ref`). A value a message
quotes never carries it: `shown` quotes with repr, which escapes control characters."""


def ref(*loc: str | int) -> str:
    """Another input named in a rule's message (relative to the type the rule checks), written
    as the caller names it: `allow_world` in Python, `allowWorld` over the provider,
    `caddy.allowWorld` in a stack file. One message serves every door."""
    return f"{_REF}{json.dumps(list(loc))}{_REF}"


def _rebased(message: str, loc: Location) -> str:
    """The message with its references made absolute (under the rule's location `loc`)."""
    parts = message.split(_REF)
    for index in range(1, len(parts), 2):
        parts[index] = json.dumps([*loc, *json.loads(parts[index])])
    return _REF.join(parts)


def named(message: str, path: Callable[[Location], str]) -> str:
    """The message with each reference written by `path` (the caller's naming)."""
    parts = message.split(_REF)
    for index in range(1, len(parts), 2):
        parts[index] = path(tuple(json.loads(parts[index])))
    return "".join(parts)


class ComponentInputError(pulumi.RunError):
    """Invalid inputs of a component: one problem per line, each naming its input."""

    def __init__(self, component: str, name: str, problems: list[Problem]) -> None:
        self.component = component
        self.problems = problems
        """(location, message); a message may reference other inputs (`named` writes them)."""
        path = schema_path if SCHEMA_NAMES.get() else snake_path
        lines = "\n".join(f"{path(loc)}: {named(message, path)}" for loc, message in problems)
        super().__init__(f"invalid inputs of {component} {name!r}:\n{lines}")


def snake_path(loc: Location) -> str:
    """An input's path as Python callers write it: `caddy.allowed_cidrs[0]`."""
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def schema_path(loc: Location) -> str:
    """An input's path as the engine names it over the provider: `caddy.allowedCidrs[0]`."""
    return snake_path(tuple(camel_case(p) if isinstance(p, str) else p for p in loc))


def shown(value: object) -> str:
    """A value as an error quotes it: repr (control characters visible), long ones cut short."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(str(value))} characters)"


def error_messages(error: ValidationError) -> list[Problem]:
    """pydantic's errors as (location, `what is wrong`) pairs, in the project's wording."""
    problems: list[Problem] = []
    for item in error.errors():
        message = item["msg"]
        if item["type"] == "secret_value":
            pass  # A secret's problem never quotes the secret.
        elif item["type"] == "extra_forbidden":
            message = "unknown key"
        elif item["type"] == "missing":
            message = "is required"
        elif item["type"] == "value_error":
            # The grammars word their messages to follow the value: `'x' is not a network`.
            message = f"{shown(item['input'])} {message.removeprefix('Value error, ')}"
        elif "input" in item and not isinstance(item["input"], dict | list):
            message = f"{shown(item['input'])}: {message}"
        problems.append((tuple(_short(part) for part in item["loc"]), message))
    return problems


def _short(part: str | int) -> str | int:
    # A dict key is part of the location: a hostile one must not make the message huge.
    if isinstance(part, str) and (len(part) > 64 or not part.isprintable()):
        return shown(part) if len(part) <= 64 else f"{part[:40]!r}... ({len(part)} characters)"
    return part


def cross_field_rule(args_type: type) -> Callable[[Rule], Rule]:
    """Register a rule over the fields of one Args (or nested) type; it returns problems."""

    def register(rule: Rule) -> Rule:
        _RULES.setdefault(args_type, []).append(rule)
        return rule

    return register


@dataclass(frozen=True, eq=False)
class Default:
    """An optional input's default, as metadata of its annotation (the one place it is stated).

    `checked_inputs` fills it in when the input is absent; help() and the schema show it.
    """

    value: Any


def _default_of(annotation: Any) -> Default | None:
    """The `Default` of a field's annotation (outside any `pulumi.Input`), or None."""
    annotation = _unwrap(annotation)
    if get_origin(annotation) is Annotated:
        for item in get_args(annotation)[1:]:
            if isinstance(item, Default):
                return item
    return None


@functools.cache
def declared_defaults(args_type: type) -> dict[str, Any]:
    """The declared default of each optional input of a TypedDict of inputs, by field."""
    defaults: dict[str, Any] = {}
    for key, hint in _hints(args_type).items():
        default = _default_of(hint)
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
        hints = _hints(annotation)
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


class _Pending:
    """Stands in, during the check, for a value not known yet (checked when it resolves)."""


_PENDING = _Pending()


def _pending_or(value: Any, handler: Callable[[Any], Any]) -> Any:
    return value if value is _PENDING else handler(value)


_MAYBE_PENDING = WrapValidator(_pending_or)
_STRICT: dict[Any, Any] = {int: StrictInt, float: StrictFloat, bool: StrictBool, str: StrictStr}


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) in (NotRequired, Required):
        (annotation,) = get_args(annotation)
    return annotation


def _is_input(annotation: Any) -> bool:
    """True for `pulumi.Input[X]`: a union with an Output or an Awaitable member."""
    return get_origin(annotation) in (Union, types.UnionType) and any(
        get_origin(member) in (Awaitable, pulumi.Output) or member is pulumi.Output
        for member in get_args(annotation)
    )


def known_type(annotation: Any) -> Any:
    """The type of a known value: without NotRequired and `pulumi.Input[...]`."""
    annotation = _unwrap(annotation)
    if get_origin(annotation) is Annotated and _is_input(get_args(annotation)[0]):
        annotation = get_args(annotation)[0]  # `Annotated[Input[X], Default(...)]`
    if _is_input(annotation):
        members = [
            member
            for member in get_args(annotation)
            if get_origin(member) not in (Awaitable, pulumi.Output)
            and member is not pulumi.Output
            and not isinstance(member, ForwardRef)
        ]
        annotation = Union[tuple(members)] if len(members) > 1 else members[0]  # noqa: UP007
    return annotation


def _model_type(annotation: Any) -> Any:
    """The pydantic type that checks a known value of `annotation`."""
    annotation = _unwrap(annotation)
    if _is_input(annotation):
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
def _hints(typed_dict: type) -> dict[str, Any]:
    # `pulumi.Input[X]` names `Output` as a forward reference.
    return get_type_hints(
        typed_dict, localns={"Output": pulumi.Output, "T": Any}, include_extras=True
    )


@functools.cache
def input_model(args_type: type) -> type[BaseModel]:
    """The pydantic model of a TypedDict of inputs (cached; made once per type)."""
    hints = _hints(args_type)
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
        hints = _hints(annotation)
        for key, item in value.items():
            if key in hints:
                problems += _rule_problems(item, hints[key], (*loc, key))
        for rule in _RULES.get(annotation, []):
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
    annotation = _unwrap(annotation)
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
        hints = _hints(annotation)
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


def _type_text(annotation: Any) -> str:
    """An input's type as help() shows it: `int (>= 1, <= 65535)`, `'auto' | 'internal'`."""
    annotation = _unwrap(annotation)
    if _is_input(annotation):
        return _type_text(known_type(annotation))
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        notes: list[str] = []
        for item in metadata:
            for constraint in getattr(item, "metadata", [item]):
                name = type(constraint).__name__
                if name in ("Ge", "Gt", "Le", "Lt"):
                    symbol = {"Ge": ">=", "Gt": ">", "Le": "<=", "Lt": "<"}[name]
                    notes.append(f"{symbol} {getattr(constraint, name.lower())}")
                elif name == "MinLen":
                    notes.append(f"at least {constraint.min_length}")
                elif getattr(constraint, "pattern", None):
                    notes.append(f"matching {constraint.pattern}")
            if hasattr(item, "func"):
                notes.append(item.func.__name__.strip("_").replace("_", " "))
        text = _type_text(inner)
        return f"{text} ({', '.join(notes)})" if notes else text
    if origin is Literal:
        return " | ".join(repr(value) for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_text(member) for member in get_args(annotation))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_text(a) for a in get_args(annotation))}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def documented(args_type: type[T]) -> type[T]:
    """The Args type with its fields, their types and their docstrings in `__doc__` (help()).

    The schema takes each field's description from the same docstrings; the provider keeps
    the type's own description without this list.
    """
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(args_type)))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for statement, following in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    required: frozenset[str] = getattr(args_type, "__required_keys__", frozenset())
    lines = []
    hints = get_type_hints(
        args_type, localns={"Output": pulumi.Output, "T": Any}, include_extras=True
    )
    for key, hint in hints.items():
        need = "required" if key in required else "optional"
        default = _default_of(hint)
        if default is not None:
            need += f", default {default.value!r}"
        lines.append(f"{key}: {_type_text(hint)}, {need}")
        lines += [f"    {line}" for line in docs.get(key, "").splitlines()]
    own = inspect.cleandoc(args_type.__doc__ or "")
    args_type.__doc__ = f"{own}{INPUTS_HEADING}" + "\n".join(lines)
    return args_type


INPUTS_HEADING = "\n\nInputs:\n"
"""Where `documented` starts the field list in a type's `__doc__`."""
