"""How a component's input problems are found and named: locations, messages, cross-field rules."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import (
    Any,
    TypeVar,
    Union,
)

import pulumi
from pulumi.provider.experimental.util import camel_case
from pydantic import (
    ValidationError,
)

# typing's own is_typeddict misses typing_extensions' TypedDict (the fetcher's ModelFile).


T = TypeVar("T")
Input = Union[T, Awaitable[T], pulumi.Output[T]]  # noqa: UP007
"""`pulumi.Input[T]` without its forward reference, so `typing.get_type_hints` resolves the
Args types (the SDK's analyzer reads both alike)."""
Location = tuple[str | int, ...]
Problem = tuple[Location, str]
Rule = Callable[[Mapping[str, Any]], list[Problem]]

CROSS_FIELD_RULES: dict[type, list[Rule]] = {}
"""The rules each Args type registered with `cross_field_rule`."""

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
        CROSS_FIELD_RULES.setdefault(args_type, []).append(rule)
        return rule

    return register
