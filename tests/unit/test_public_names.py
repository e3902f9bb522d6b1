"""`components/__init__.py`'s three lists of public names stay what the package exports.

The package's public names are its components (the ones the provider hosts) and every type their
Args reach, each taken from the module that defines it: `_HOMES` maps them, `__all__` lists
them, and the `TYPE_CHECKING` imports give type checkers the same names from the same modules.
"""

from __future__ import annotations

import ast
import inspect
import typing
from typing import Any

import pydantic

import components
from components.provider import COMPONENTS
from tests.conftest import ROOT


def _reached(annotation: Any, found: dict[str, str]) -> None:
    """Every class of this package that `annotation` names, through containers and models."""
    if typing.get_origin(annotation) is not None:
        for argument in typing.get_args(annotation):
            _reached(argument, found)
        return
    if not isinstance(annotation, type) or not annotation.__module__.startswith("components."):
        return
    if annotation.__name__ in found:
        return
    found[annotation.__name__] = annotation.__module__
    if issubclass(annotation, pydantic.BaseModel):
        for field in annotation.model_fields.values():
            _reached(field.annotation, found)
    elif typing.is_typeddict(annotation):
        for hint in typing.get_type_hints(annotation).values():
            _reached(hint, found)


def exported_types() -> dict[str, str]:
    """Each component and each type its Args reach → the module that defines it."""
    found: dict[str, str] = {}
    for component in COMPONENTS:
        found[component.__name__] = component.__module__
        args = inspect.signature(component.__init__).parameters["args"]
        _reached(typing.get_type_hints(component.__init__)[args.name], found)
    return found


def static_imports() -> dict[str, str]:
    """The names the `if TYPE_CHECKING:` block of components/__init__.py imports, and from where."""
    tree = ast.parse((ROOT / "components" / "__init__.py").read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )  # fmt: skip
    return {
        alias.name: str(statement.module)
        for statement in block.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }


def test_the_package_exports_each_component_and_every_type_its_args_reach() -> None:
    homes: dict[str, str] = components._HOMES
    assert homes == exported_types()


def test_all_and_the_type_checking_imports_are_the_same_names_from_the_same_modules() -> None:
    homes: dict[str, str] = components._HOMES
    assert components.__all__ == sorted(homes)
    assert static_imports() == homes
