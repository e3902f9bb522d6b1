"""The pairs of a stack field and the component input it feeds, with what each side declares.

A pair: a component input whose refusal `infra.config.inputs.stack_key` reports under a stack
key, where that key is a field of the stack model and both hold the same kind of value (an
int for an int, a model for a TypedDict). What each side declares: its bounds and patterns
(the constraint objects of its annotation, so a shared alias is one declaration), its default
and its docs.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typing_extensions import is_typeddict

from components.field_docs import field_docs
from components.llamacpp.inputs import LlamaCppRpcWorkerArgs, LlamaCppVulkanServerArgs
from components.model_store.inputs import GgufModelStoreArgs
from components.validation_annotations import default_of, known_type, type_hints, with_defaults
from components.vllm.inputs import VllmRocmServerArgs
from infra.config import DockerHostStack, KubernetesStack
from infra.config.inputs import stack_key

COMPONENTS: dict[str, tuple[type, type[BaseModel]]] = {
    "LlamaCppVulkanServer": (LlamaCppVulkanServerArgs, KubernetesStack),
    "LlamaCppRpcWorker": (LlamaCppRpcWorkerArgs, KubernetesStack),
    "GgufModelStore": (GgufModelStoreArgs, KubernetesStack),
    "VllmRocmServer": (VllmRocmServerArgs, DockerHostStack),
}
"""Each component the stack files feed, its Args type and the stack model that feeds it."""

DERIVED = {
    ("LlamaCppVulkanServer", "model.claim_name"),
    ("LlamaCppVulkanServer", "model.check_image"),
    ("LlamaCppVulkanServer", "model.run_as_user"),
    ("LlamaCppVulkanServer", "model.fetcher_config_map"),
    ("LlamaCppVulkanServer", "metrics.fetch_job_pattern"),
    ("LlamaCppVulkanServer", "metrics.monitor_kind"),
    ("GgufModelStore", "draft.revision"),
    ("VllmRocmServer", "model_lock.repo"),
    ("VllmRocmServer", "model_lock.revision"),
    ("VllmRocmServer", "model_lock.unresolved_patterns"),
}
"""Inputs whose refusal names a stack key although the target derives their value (the
store's outputs in the server's model volume, the fetch Jobs' name pattern, the monitor kind
from `serviceMonitor`, the lock's resolution): no stack field feeds them as they are."""


@dataclass(frozen=True)
class Side:
    """What one side declares of an input."""

    annotation: Any
    constraints: tuple[Any, ...]
    """The objects that carry its bounds, patterns and validators (a shared alias: the same)."""
    literal: frozenset[Any] | None
    required: bool
    default: Any
    """The declared default (PydanticUndefined: none)."""
    docs: str | None


@dataclass(frozen=True)
class Pair:
    """A stack field and the component input it feeds."""

    component: str
    path: str
    key: str
    input: Side
    field: Side


def _peeled(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """The base type of an annotation (Optional and Annotated peeled) and its constraints."""
    constraints: list[Any] = []
    annotation = known_type(annotation)
    while True:
        if get_origin(annotation) is Annotated:
            inner, *metadata = get_args(annotation)
            constraints += [
                item for item in metadata if isinstance(item, FieldInfo) or hasattr(item, "func")
            ]
            annotation = inner
        elif get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(
            annotation
        ):
            members = [m for m in get_args(annotation) if m is not type(None)]
            if len(members) != 1:
                break
            annotation = members[0]
        else:
            break
    return annotation, tuple(constraints)


def _kind(base: Any) -> Any:
    if get_origin(base) is Literal:
        return "literal"
    if is_typeddict(base) or (isinstance(base, type) and issubclass(base, BaseModel)):
        return "object"
    if get_origin(base) is list:
        return ("list", _kind(_peeled(get_args(base)[0])[0]))
    if get_origin(base) is dict:
        return "dict"
    return base


def constraint_text(constraints: tuple[Any, ...]) -> list[str]:
    """Constraints as comparable text: `ge=1`, `pattern=...`, a validator's name."""
    texts = []
    for item in constraints:
        if hasattr(item, "func"):
            texts.append(item.func.__name__)
            continue
        for constraint in item.metadata:
            fields = getattr(constraint, "__dataclass_fields__", None) or vars(constraint)
            texts += [
                f"{n}={getattr(constraint, n)}"
                for n in fields
                if getattr(constraint, n) is not None
            ]
    return sorted(texts)


def without_none(value: Any) -> Any:
    """A value with its None entries dropped: an absent optional input is None."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value]
    return value


def _side(annotation: Any, required: bool, default: Any, docs: str | None) -> Side:
    base, constraints = _peeled(annotation)
    literal = frozenset(get_args(base)) if get_origin(base) is Literal else None
    return Side(annotation, constraints, literal, required, without_none(default), docs)


def _inputs(args_type: type, prefix: str = "") -> Iterator[tuple[str, Side]]:
    hints = type_hints(args_type)
    docs = field_docs(args_type)
    required: frozenset[str] = getattr(args_type, "__required_keys__", frozenset())
    for name, hint in hints.items():
        declared = default_of(hint)
        default = PydanticUndefined if declared is None else declared.value
        if declared is not None:
            default = with_defaults(default, hint)
        yield prefix + name, _side(hint, name in required, default, docs.get(name))
        base = _peeled(hint)[0]
        if is_typeddict(base):
            yield from _inputs(base, f"{prefix}{name}.")


def _field(model: type[BaseModel], key: str) -> Side | None:
    """The stack model's field at a stack key, or None where the key is no field."""
    current: Any = model
    parts = key.split(".")
    for index, part in enumerate(parts):
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        named = [(n, f) for n, f in current.model_fields.items() if (f.alias or n) == part]
        if not named:
            return None
        name, info = named[0]
        annotation = typing.get_type_hints(current, include_extras=True)[name]
        if index == len(parts) - 1:
            default = info.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                default = default.model_dump()
            elif isinstance(default, list):
                default = [d.model_dump() if isinstance(d, BaseModel) else d for d in default]
            docs = info.description or field_docs(current).get(name)
            return _side(annotation, info.is_required(), default, docs)
        current = _peeled(annotation)[0]
        if get_origin(current) is list:
            current = _peeled(get_args(current)[0])[0]
    return None


def pairs() -> Iterator[Pair]:
    """Every pair of a stack field and the component input it feeds."""
    for component, (args_type, model) in COMPONENTS.items():
        for path, side in _inputs(args_type):
            loc = tuple(path.split("."))
            key = stack_key(component, loc)
            if key.startswith(f"{component}.") or (component, path) in DERIVED:
                continue
            field = _field(model, key)
            if field is None:
                continue
            if _kind(_peeled(side.annotation)[0]) == _kind(_peeled(field.annotation)[0]):
                yield Pair(component, path, key, side, field)
