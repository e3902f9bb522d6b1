"""The docstring under each field of a class, read from its source: the one reader of field docs
(an Args type's help() and the stack file's schema both read them)."""

import ast
import inspect
import itertools
import textwrap


def class_field_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated field of `cls`'s own body (not its bases'), by field
    name; empty where the source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs
