"""Any value at any key of a stack: a valid stack or a config error naming keys, never a crash."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from infra.config import ConfigError, parse_stack
from infra.targets.registry import stack_plan
from tests.conftest import stack_values, unlocked_source
from tests.support.profiles import examples

STACKS = {name: stack_values(name) for name in ("strix-halo", "mi300x")}


def key_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a stack's values (the places a user can write a value)."""
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += key_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            paths += key_paths(value, (*prefix, index))
    return paths


PATHS = [(name, path) for name, values in STACKS.items() for path in key_paths(values)]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "0", "1e400", "-1", "$(id)", "a\nb", "x\x00", "fe80::1%lo/64"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(PATHS), value=values)
# Found here: a size of no bytes divided the speed estimate by zero, one past a float's range
# overflowed the byte count.
@example(where=("strix-halo", ("model", "sizeGib")), value=4.219121200533393e-17)
@example(where=("strix-halo", ("model", "sizeGib")), value=1.6742321987285427e299)
def test_any_value_anywhere_is_a_stack_or_a_config_error(
    where: tuple[str, tuple[Any, ...]], value: Any
) -> None:
    name, path = where
    edited = copy.deepcopy(STACKS[name])
    node: Any = edited
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    try:
        stack = parse_stack(edited)
        stack_plan(stack, unlocked_source(stack))
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            # `key.path[0].more: what is wrong`, the first part a key of the stack or `plan`.
            first = re.match(r"^([A-Za-z]+)[.\[:]", problem)
            assert first and first[1] in {*STACKS[name], "target", "plan"}, problem
