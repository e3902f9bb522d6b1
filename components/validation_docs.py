"""An Args type's help(): each input's type, default and docstring, from the one annotation."""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import pulumi

from components.validation_annotations import default_of, is_input, known_type, unwrapped
from components.validation_problems import T


def _type_text(annotation: Any) -> str:
    """An input's type as help() shows it: `int (>= 1, <= 65535)`, `'auto' | 'internal'`."""
    annotation = unwrapped(annotation)
    if is_input(annotation):
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
    import inspect

    from components.field_docs import field_docs

    docs = field_docs(args_type)
    required: frozenset[str] = getattr(args_type, "__required_keys__", frozenset())
    lines = []
    hints = get_type_hints(
        args_type, localns={"Output": pulumi.Output, "T": Any}, include_extras=True
    )
    for key, hint in hints.items():
        need = "required" if key in required else "optional"
        default = default_of(hint)
        if default is not None:
            need += f", default {default.value!r}"
        lines.append(f"{key}: {_type_text(hint)}, {need}")
        lines += [f"    {line}" for line in docs.get(key, "").splitlines()]
    own = inspect.cleandoc(args_type.__doc__ or "")
    args_type.__doc__ = f"{own}{INPUTS_HEADING}" + "\n".join(lines)
    return args_type


INPUTS_HEADING = "\n\nInputs:\n"
"""Where `documented` starts the field list in a type's `__doc__`."""
