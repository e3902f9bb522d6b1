"""A drafted stack as YAML text with its comments, checked to load to exactly the draft."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.config.base import NAMESPACE
from infra.lock import ModelLock
from infra.new_stack import Draft

# -- the file -------------------------------------------------------------------------------


class _StackDumper(yaml.SafeDumper):
    """Lists indented under their key, as the hand-written stack files have them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def stack_file_text(draft: Draft) -> str:
    """The stack file: the opening comment, then `config:` with the `llm-infra:` keys, each
    commented key with its comment on the line above; loads to exactly the document."""
    document = {"config": {f"{NAMESPACE}:{key}": value for key, value in draft.values.items()}}
    text = yaml.dump(document, Dumper=_StackDumper, sort_keys=False, width=100, allow_unicode=False)
    lines = text.splitlines()
    above: dict[int, list[str]] = {}
    config = _value_node(yaml.compose(text), "config")
    for path, comment in draft.comments.items():
        if any(ord(char) < 32 for char in comment):
            raise ValueError(f"the comment of {'.'.join(path)} is not one line")
        node: yaml.Node | None = config
        key_node = None
        for depth, part in enumerate(path):
            key_node, node = _key_and_value(node, f"{NAMESPACE}:{part}" if depth == 0 else part)
        if key_node is None:
            raise ValueError(f"no key {'.'.join(path)} to comment")
        indent = " " * key_node.start_mark.column
        above.setdefault(key_node.start_mark.line, []).append(f"{indent}# {comment}")
    written: list[str] = []
    for number, line in enumerate(lines):
        written += above.get(number, [])
        written.append(line)
    result = "\n".join([*draft.header, *written]) + "\n"
    if yaml.safe_load(result) != document:
        raise AssertionError("init: the comments changed what the stack file means")
    return result


def _value_node(node: yaml.Node | None, key: str) -> yaml.Node | None:
    return _key_and_value(node, key)[1]


def _key_and_value(node: yaml.Node | None, key: str) -> tuple[yaml.Node | None, yaml.Node | None]:
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if key_node.value == key:
                return key_node, value
    return None, None


def with_exact_files(lock: ModelLock) -> ModelLock:
    """The lock of a GGUF model with its patterns replaced by the exact repo paths it resolved
    (what `llm-infra lock` writes for a stack that lists them), so the stack names its files."""
    document = lock.model_dump(mode="json", exclude_none=True)
    document["patterns"] = [entry["path"] for entry in lock.files]
    return ModelLock.model_validate(document)


def check_lock_matches(lock: ModelLock, values: Mapping[str, Any]) -> None:
    """The lock is current for the drafted stack's model, as render will check it."""
    from infra.config.base import RepoModelSettings

    model = values["model"]
    settings = RepoModelSettings.model_validate(
        {"repo": model["repo"], "revision": model["revision"], "files": model["files"]}
    )
    stale = lock.stale_problems(settings, Path("STACK.lock.json"))
    if stale:
        raise AssertionError(f"init: the lock does not match the stack: {stale}")
