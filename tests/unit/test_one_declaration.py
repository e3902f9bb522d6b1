"""Each input is declared once: a stack field that feeds a component input neither repeats
nor contradicts the input's bound, pattern or default (house rule 2).

The pairs are found from the models (`tests/support/declarations.py`); a difference made on
purpose is in `infra.config.declared.STACK_OWN`, with its reason.

Measured on the tree this test came with: 147 pairs, 111 with a bound, pattern or enum on
either side: 52 shared one declaration, 32 were written twice alike and 27 differed (the stack
field without the input's upper bound: `server.temperature: 150` passed the stack file and
its schema); 38 defaults were written on both sides, 29 were the stack's only while the
input required the value, 6 differed.
"""

from __future__ import annotations

from pydantic_core import PydanticUndefined

from infra.config.declared import STACK_OWN
from tests.support.declarations import Pair, constraint_text, pairs

PAIRS = list(pairs())
EMPTY: tuple[object, ...] = (None, [], {})
INPUT_DOCS: dict[str, set[str | None]] = {}
for _pair in PAIRS:
    INPUT_DOCS.setdefault(_pair.key, set()).add(_pair.input.docs)
"""Per stack key, the docs of the inputs it feeds (one key may feed several: the namespace)."""


def bound_problem(pair: Pair) -> str | None:
    """How the two sides' bounds and patterns break the rule, or None."""
    given, field = pair.input, pair.field
    if given.literal is not None or field.literal is not None:
        if given.literal == field.literal:
            return None
        ours, theirs = sorted(map(str, field.literal or ())), sorted(map(str, given.literal or ()))
        return f"allows {ours}, the input {theirs}"
    if {id(c) for c in given.constraints} == {id(c) for c in field.constraints}:
        return None
    ours, theirs = constraint_text(field.constraints), constraint_text(given.constraints)
    if ours == theirs:
        return f"repeats the input's {ours} (use the input's type alias)"
    return f"declares {ours}, the input {theirs}"


def default_problem(pair: Pair) -> str | None:
    """How the two sides' defaults break the rule, or None."""
    given, field = pair.input, pair.field
    if given.default is not PydanticUndefined:
        if field.required:
            return f"is required, the input defaults to {given.default!r}"
        if field.default != given.default:
            return f"defaults to {field.default!r}, the input to {given.default!r}"
        if field.docs not in INPUT_DOCS[pair.key]:
            return f"repeats the input's default {given.default!r} (take it with `declared`)"
        return None
    if field.required or field.default in EMPTY:
        return None
    required = "requires it" if given.required else "has none"
    return f"defaults to {field.default!r}, the input {required} (declare it in the component)"


def report(check: object) -> list[str]:
    lines = []
    for pair in PAIRS:
        problem = check(pair)  # type: ignore[operator]
        if problem is not None and pair.key not in STACK_OWN:
            lines.append(f"{pair.key} ({pair.component}.{pair.path}): {problem}")
    return lines


def test_no_bound_or_pattern_of_a_stack_field_repeats_or_contradicts_its_input() -> None:
    problems = report(bound_problem)
    assert problems == [], "\n".join([f"{len(problems)} pairs:", *problems])


def test_no_default_of_a_stack_field_repeats_contradicts_or_replaces_its_inputs() -> None:
    problems = report(default_problem)
    assert problems == [], "\n".join([f"{len(problems)} pairs:", *problems])


def test_each_difference_on_purpose_is_one_and_has_a_reason() -> None:
    differing = {p.key for p in PAIRS if bound_problem(p) or default_problem(p)}
    assert sorted(set(STACK_OWN) - differing) == []
    assert all(reason.strip() for reason in STACK_OWN.values())


def test_the_pairs_are_found() -> None:
    keys = {(p.key, p.path) for p in PAIRS}
    assert ("server.contextSize", "flags.ctx_size") in keys
    assert ("server.probes.startup.failureThreshold", "probes.startup.failure_threshold") in keys
    assert ("caddy.image", "caddy.image") in keys
    # A key named for a value the target derives is no pair (the store's claim is its output).
    assert ("store.name", "model.claim_name") not in keys
