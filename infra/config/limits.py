"""Size limits on the files a stack is read from, checked before they are parsed.

A stack file or a lock is a few kilobytes; a file far larger, or a YAML document whose aliases
expand to millions of values (a few hundred bytes of nested `&a [*a, *a, ...]` expand to
hundreds of megabytes once anything walks them), is refused before it is expanded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.config.base import ConfigError

MAX_STACK_FILE_BYTES = 1024 * 1024
"""A stack file (the largest in this repository is a few KiB)."""
MAX_LOCK_FILE_BYTES = 16 * 1024 * 1024
"""A lock file, GGUF summary included."""
MAX_YAML_VALUES = 100_000
"""Values (scalars, lists, mappings) a YAML document may hold with its aliases expanded."""
MAX_MESSAGE_VALUE = 120
"""Characters of a value an error message quotes."""


def quoted(value: object, limit: int = MAX_MESSAGE_VALUE) -> str:
    """repr(value), cut to a length an error message can carry."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def read_limited(path: Path, limit: int, what: str) -> str:
    """The text of a file of at most `limit` bytes; ConfigError for a larger one (unread),
    UnicodeDecodeError for one that is not UTF-8."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the {what}: {exc.strerror}"]) from None
    if len(data) > limit:
        raise ConfigError(
            [f"{path}: the {what} is larger than {limit} bytes: not read (is it the right file?)"]
        )
    # A UnicodeDecodeError (a ValueError) is the caller's to word: "not a readable ...".
    return data.decode("utf-8")


def _expanded_values(node: yaml.Node, memo: dict[int, int], active: set[int]) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise ValueError("an alias refers to a value that contains it")
    active.add(key)
    count = 1
    if isinstance(node, yaml.SequenceNode):
        count += sum(_expanded_values(child, memo, active) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            count += _expanded_values(name, memo, active) + _expanded_values(value, memo, active)
    active.discard(key)
    memo[key] = count
    return count


# libyaml's parser when PyYAML was built with it (the wheels are): the same nodes, marks and
# errors, ~10 times faster than the pure-Python one.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str, path: Path) -> Any:
    """yaml.safe_load, refusing a document whose aliases expand past MAX_YAML_VALUES (counted
    on the node graph, before anything is expanded)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values = _expanded_values(node, {}, set())
        if values > MAX_YAML_VALUES:
            raise ConfigError(
                [
                    f"{path}: the YAML expands to {values} values with its aliases (at most "
                    f"{MAX_YAML_VALUES}): not read"
                ]
            )
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError([f"{path}: the YAML is nested too deeply"]) from None
    except ValueError as exc:
        raise ConfigError([f"{path}: not a readable YAML file ({exc})"]) from None
    finally:
        loader.dispose()
