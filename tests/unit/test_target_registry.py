"""Targets are a table: each kind of stack has one Target, and no module outside the table and
the config models switches on a stack's type (`isinstance(stack, FleetStack)`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from infra.config import (
    ConfigError,
    DockerHostStack,
    FleetStack,
    KubernetesStack,
    Mi300xStack,
    StrixHaloStack,
    parse_stack,
)
from infra.config.schema import STACK_MODELS as SCHEMA_MODELS
from infra.config.stack import STACK_MODELS, StackConfig
from infra.config.stack import TARGETS as TARGET_WORDS
from infra.targets.registry import (
    ONE_SERVER,
    TARGETS,
    Drafts,
    OneServer,
    SizesLlamaCpp,
    TunedRuntimes,
    endpoint_url,
    init_kinds,
    llamacpp_server,
    model_name,
    route,
    routes,
    target_module,
    target_of,
    with_tuned_runtimes,
)
from tests.conftest import ROOT, stack_values

STACK_TYPES = {"KubernetesStack", "StrixHaloStack", "DockerHostStack", "Mi300xStack", "FleetStack"}
ALLOWED = ("infra/config/", "infra/targets/registry.py")
"""Where a stack's type may decide: the models themselves, and the table of targets."""


def _names(node: ast.expr) -> set[str]:
    """The class names a type argument names: `A`, `A | B`, `(A, B)`, `config.A`."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.BinOp):
        return _names(node.left) | _names(node.right)
    if isinstance(node, ast.Tuple):
        return {name for element in node.elts for name in _names(element)}
    return set()


def stack_type_switches(source: str) -> list[int]:
    """The lines of `source` that decide by a stack's type: isinstance / issubclass with a stack
    class, or a `case KubernetesStack():` pattern."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
            and _names(node.args[1]) & STACK_TYPES
        ) or (isinstance(node, ast.MatchClass) and _names(node.cls) & STACK_TYPES):
            lines.append(node.lineno)
    return sorted(lines)


def switches_by_module() -> dict[str, list[int]]:
    """Each module of infra/ and components/ that switches on a stack's type, with the lines."""
    found = {}
    for package in ("infra", "components"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(ALLOWED):
                continue
            lines = stack_type_switches(path.read_text())
            if lines:
                found[relative] = lines
    return found


def test_no_module_outside_the_registry_switches_on_a_stack_type() -> None:
    found = switches_by_module()
    grown = {module: lines for module, lines in found.items() if lines}
    assert grown == {}, (
        "ask the registry (infra.targets.registry.target_of(stack), or a method every stack "
        f"model has) instead of switching on the stack's type: {grown}"
    )


def test_the_switch_finder_sees_each_form_of_switch() -> None:
    source = (
        "if isinstance(stack, FleetStack): pass\n"
        "ok = isinstance(stack, config.KubernetesStack | Mi300xStack)\n"
        "ok = isinstance(value, (int, DockerHostStack))\n"
        "match stack:\n"
        "    case StrixHaloStack(): pass\n"
        "ok = isinstance(value, dict)\n"
    )
    assert stack_type_switches(source) == [1, 2, 3, 5]


@pytest.mark.parametrize(
    ("stack", "kind", "model"),
    [
        ("strix-halo", "kubernetes", KubernetesStack),
        ("mi300x", "docker-host", DockerHostStack),
        ("strix-halo-pair", "fleet", FleetStack),
    ],
)
def test_each_committed_stack_is_deployed_by_the_target_of_its_kind(
    stack: str, kind: str, model: type[object]
) -> None:
    parsed = parse_stack(stack_values(stack))
    assert type(parsed) is model
    assert target_of(parsed) is TARGETS[kind]
    assert TARGETS[kind].kind == kind


def test_every_kind_of_stack_model_has_a_target_and_no_target_lacks_one() -> None:
    assert list(TARGETS) == list(STACK_MODELS)
    assert {"kubernetes", "docker-host", "fleet"} <= set(TARGETS)
    assert all(model.kind == kind for kind, model in STACK_MODELS.items())
    for kind, target in TARGETS.items():
        # Each kind's target is its own module's, named for the kind.
        assert target.kind == kind
        assert type(target).__module__ == target_module(kind)
        assert (ROOT / (target_module(kind).replace(".", "/") + ".py")).is_file()


def test_the_former_stack_names_still_name_the_platform_types() -> None:
    assert StrixHaloStack is KubernetesStack
    assert Mi300xStack is DockerHostStack
    assert isinstance(parse_stack(stack_values("strix-halo")), StrixHaloStack)


def test_a_fleet_answers_for_each_server_what_a_single_server_stack_answers_for_itself() -> None:
    single = parse_stack(stack_values("strix-halo"))
    fleet = parse_stack(stack_values("strix-halo-pair"))
    assert isinstance(fleet, FleetStack)
    names = [entry.resource_name for entry in fleet.servers]
    assert single.server_names() == [None] and fleet.server_names() == names
    assert single.server_stacks() == [single]
    assert single.server_key("server.gpuLayers: 44", 0) == "server.gpuLayers: 44"
    assert fleet.server_key("server.gpuLayers: 44", 1) == "servers[1].gpuLayers: 44"
    assert (single.model_key(0), fleet.model_key(1)) == ("model", "servers[1].model")
    lock = Path("stacks/x.lock.json")
    assert single.lock_paths(lock) == [lock]
    assert len(fleet.lock_paths(lock)) == len(names)


PARTS: dict[str, set[type]] = {
    "kubernetes": {OneServer, SizesLlamaCpp, TunedRuntimes, Drafts},
    "docker-host": {OneServer, Drafts},
    "fleet": {TunedRuntimes},
}
"""The optional parts each target implements: a fleet has no one server, none to size or tune
by itself, and no init draft."""


@pytest.mark.parametrize("kind", sorted(PARTS))
def test_each_target_implements_the_core_and_only_the_optional_parts_it_has(kind: str) -> None:
    target = TARGETS[kind]
    parts = (OneServer, SizesLlamaCpp, TunedRuntimes, Drafts)
    assert {part for part in parts if isinstance(target, part)} == PARTS[kind]
    assert all(callable(getattr(target, method)) for method in ("deploy", "plan", "docs"))
    # What a fleet does not have it does not define (no method that only raises).
    if kind == "fleet":
        assert not hasattr(target, "endpoint_url") and not hasattr(target, "llamacpp_server")


@pytest.mark.parametrize("ask", [endpoint_url, model_name, route])
def test_a_fleet_asked_for_one_servers_answer_gets_the_one_server_error(ask: object) -> None:
    fleet = parse_stack(stack_values("strix-halo-pair"))
    assert isinstance(fleet, FleetStack)
    with pytest.raises(ConfigError) as caught:
        ask(fleet)  # type: ignore[operator]
    assert caught.value.problems == [ONE_SERVER]
    # Each of its servers has the part: one route per server.
    assert [entry["model_name"] for entry in routes(fleet)] == [
        entry.alias for entry in fleet.servers
    ]


def test_a_target_without_a_part_gets_what_its_commands_give_without_it() -> None:
    single = parse_stack(stack_values("strix-halo"))
    vllm = parse_stack(stack_values("mi300x"))
    fleet = parse_stack(stack_values("strix-halo-pair"))
    assert llamacpp_server(single) is single
    assert llamacpp_server(vllm) is None and llamacpp_server(fleet) is None
    # vLLM has one runtime: nothing to resolve, no tune record read.
    assert with_tuned_runtimes(vllm, ROOT / "stacks" / "no-such.lock.json") is vllm


def test_the_targets_init_drafts_for_are_read_from_the_table() -> None:
    assert init_kinds() == [kind for kind, target in TARGETS.items() if isinstance(target, Drafts)]
    assert init_kinds()[:2] == ["kubernetes", "docker-host"]
    assert "fleet" not in init_kinds()


def test_the_lists_of_targets_are_read_from_the_stack_models() -> None:
    models = get_args(StackConfig)
    assert models == SCHEMA_MODELS
    assert list(STACK_MODELS.values()) == list(models)
    assert set(TARGETS) == set(STACK_MODELS)
    literals = {v for m in models for v in get_args(m.model_fields["target"].annotation)}
    assert set(TARGET_WORDS) == literals == {"kubernetes", "docker-host"}
