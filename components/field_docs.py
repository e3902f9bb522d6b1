"""The docstring under each field of a class, read from its source: the one reader of field docs
(an Args type's help(), the provider schema and the stack file's schema all read them)."""

import ast
import functools
import inspect
import itertools
import sys
import textwrap


@functools.cache
def _module_classes(module: str) -> dict[str, ast.ClassDef]:
    """The top-level class statements of a module's source, by name (each source parsed once:
    the Args types and config models are documented when their modules load)."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (OSError, TypeError, KeyError):
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _class_node(cls: type) -> ast.ClassDef | None:
    """The class statement of `cls`, or None where its source cannot be read."""
    node = _module_classes(cls.__module__).get(cls.__qualname__)
    if node is not None:
        return node
    try:  # a class not at the top of its module
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return None
    found = tree.body[0]
    return found if isinstance(found, ast.ClassDef) else None


def _own_docs(node: ast.ClassDef) -> dict[str, str]:
    docs: dict[str, str] = {}
    for field, after in itertools.pairwise(node.body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _project_bases(cls: type, node: ast.ClassDef) -> list[type]:
    """The bases `cls`'s statement names that are classes of this project (its top-level
    package). Read from the source: a TypedDict keeps no bases at run time before Python 3.12."""
    package = cls.__module__.partition(".")[0]
    namespace = vars(sys.modules[cls.__module__])
    found = []
    for base in node.bases:
        value = namespace.get(base.id) if isinstance(base, ast.Name) else None
        if isinstance(value, type) and value.__module__.partition(".")[0] == package:
            found.append(value)
    return found


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated field of `cls` and of the bases it inherits fields
    from, by field name (a field of its own wins); empty where the source cannot be read."""
    return dict(_field_docs(cls))


@functools.cache
def _field_docs(cls: type) -> dict[str, str]:
    node = _class_node(cls)
    if node is None:
        return {}
    docs: dict[str, str] = {}
    for base in _project_bases(cls, node):
        docs.update(_field_docs(base))
    docs.update(_own_docs(node))
    return docs
