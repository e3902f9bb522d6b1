"""Hostile strings in every string input, through every door.

The refusals are unit tests of the grammars: each hostile string, in each string field of the
stack file, of each component's Python constructor (a fresh mock engine per input) and of each
component over `provider/` (one provider process, Construct over gRPC as the engine sends it),
is refused naming the field as that caller wrote it, before any resource exists.

Strings the grammars admit (quotes in free text, unicode as punycode, long values, glob-like
patterns) really render and run, the Caddyfile in the real caddy:
tests/contract/test_hostile_strings_run.py.
"""

from __future__ import annotations

import copy
import hashlib
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import pytest
from pulumi.provider.experimental.util import camel_case
from pulumi.runtime.proto import provider_pb2_grpc
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from components.validation import ComponentInputError, snake_path
from infra.config import ConfigError, parse_stack
from infra.config.server import ProbesSettings
from infra.render import EchoMocks, RecordingMonitor, run_program
from tests.conftest import ROOT, stack_values
from tests.support.component_inputs import (
    COMPONENTS,
    FREE_TEXT,
    wire_names,
    with_string,
)
from tests.support.component_inputs import string_fields as input_strings
from tests.support.hostile_input import (
    HOSTILE,
    RPC_IMAGE,
    SECTIONS,
    Path_,
)
from tests.support.provider_deploy import PROJECT, STACK, Deployment, input_errors
from tests.support.resource_monitor import ResourceMonitor, Served, serving


def _strings(annotation: Any) -> Iterator[tuple[str, Any]]:
    """How a str can appear in a field's type: ('str', None), ('list', None), ('dict-key'|
    'dict-value', None) or ('model', Model)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _strings(typing.get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _strings(arg)
    elif origin is list:
        (item,) = typing.get_args(annotation)
        for kind, model in _strings(item):
            yield ("list" if kind == "str" else f"list-{kind}"), model
    elif origin is dict:
        key, value = typing.get_args(annotation)
        if any(kind == "str" for kind, _ in _strings(key)):
            yield "dict-key", None
        if any(kind == "str" for kind, _ in _strings(value)):
            yield "dict-value", None
    elif origin is Literal:
        return
    elif annotation is str:
        yield "str", None
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield "model", annotation


def string_fields(model: type[BaseModel], prefix: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    """(path of stack-file keys, how to put a string there) for every string in the model."""
    for name, field in model.model_fields.items():
        key = field.alias or to_camel(name)
        for kind, nested in _strings(field.annotation):
            if kind == "model":
                yield from string_fields(nested, (*prefix, key))
            elif kind == "list-model":
                yield from string_fields(nested, (*prefix, key, 0))
            else:
                yield (*prefix, key), kind


def cases() -> Iterator[Any]:
    """(stack, key path, how a string goes there) for each string key of each stack file."""
    for stack, model in SECTIONS.items():
        for path, kind in string_fields(model):
            if path[0] != "target":
                yield pytest.param(
                    stack, path, kind, id=f"{stack}-{'.'.join(map(str, path))}-{kind}"
                )


def parents() -> dict[Path_, Any]:
    """Valid values for sections a stack file leaves out, so every field can be reached."""
    readme = ROOT / "README.md"
    return {
        ("network",): {},
        ("litellm",): {},
        ("memory",): {"vramGib": 90},
        ("memory", "device"): {"name": "radeon-8060s"},
        ("network", "clients"): [{"namespace": "litellm"}],
        ("metrics",): {},
        ("metrics", "scrapers"): [{"namespace": "monitoring"}],
        ("metrics", "gpuExporter"): {},
        ("server", "probes"): ProbesSettings().model_dump(by_alias=True),
        # A declared runtime (a custom build of the pinned version, with rpc).
        ("server", "runtime"): {
            "name": "my-build",
            "image": "registry.lan/llama.cpp:vulkan-rpc-b11434",
            "backend": "vulkan",
            "capabilities": ["rpc"],
        },
        # A split model: one worker on another node (the server then needs an RPC build).
        ("server", "rpc"): {
            "workers": [{"nodeSelector": {"kubernetes.io/hostname": "nucbox-2"}, "vramGib": 90}]
        },
        ("server", "rpc", "workers", 0, "resources"): {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "4", "memory": "4Gi"},
        },
        # Speculative decoding with a draft model (a method deepseek4 loads).
        ("server", "speculative"): {
            "method": "draft-dspark",
            "draft": {"repo": "unsloth/Draft-GGUF", "files": ["d.gguf"], "sizeGib": 1},
        },
        ("server", "speculative", "draft"): {
            "repo": "unsloth/Draft-GGUF",
            "files": ["d.gguf"],
            "sizeGib": 1,
        },
        ("patches",): [
            {
                "source": "README.md",
                "target": "/usr/lib/python3/x.py",
                "sha256": hashlib.sha256(readme.read_bytes()).hexdigest(),
            }
        ],
    }


def single_server_path(path: Path_) -> Path_:
    """A `servers[i]` path as the single-server stack's path (`server.`, `model.`, `store.`)."""
    if path[:1] != ("servers",):
        return path
    rest = path[2:]
    return rest if rest[:1] in (("model",), ("store",), ("memory",)) else ("server", *rest)


def with_value(values: dict[str, Any], path: Path_, kind: str, value: str) -> dict[str, Any]:
    """The stack's values with the hostile value at path (absent sections filled in validly)."""
    edited = copy.deepcopy(values)
    node: Any = edited
    defaults = parents()
    for depth, part in enumerate(path[:-1]):
        if not isinstance(part, int) and part not in node:
            section = single_server_path(path[: depth + 1])
            node[part] = copy.deepcopy(defaults[section])
            if section == ("server", "rpc"):
                server = edited["server"] if "server" in edited else edited["servers"][path[1]]
                server["image"] = RPC_IMAGE
        node = node[part]
    last = path[-1]
    if kind == "str":
        node[last] = value
    elif kind == "list":
        node[last] = [value, *(node.get(last) or [])[1:]]
    elif kind == "dict-key":
        node[last] = {value: "x"}
    else:
        node[last] = {"k": value}
    return edited


def key_of(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


STACK_VALUES = {stack: stack_values(stack) for stack in SECTIONS}
"""Each stack file's values, read once: `with_value` edits a copy."""


@pytest.mark.parametrize(("stack", "path", "kind"), list(cases()))
def test_a_stack_file_refuses_each_hostile_string_naming_its_key(
    stack: str, path: Path_, kind: str
) -> None:
    key = key_of(path[:-1] if kind.startswith("dict") else path).removesuffix("[0]")
    not_refused: list[tuple[str, object]] = []
    for value in HOSTILE:
        edited = with_value(STACK_VALUES[stack], path, kind, value)
        try:
            parse_stack(edited)
        except ConfigError as caught:
            if not any(problem.startswith(key) for problem in caught.problems):
                not_refused.append((value, caught.problems))
        else:
            not_refused.append((value, "accepted"))
    assert not_refused == []


# -- the components' own doors ----------------------------------------------------------------


def component_fields() -> Iterator[tuple[str, Path_, str]]:
    """(component, input path, how a string goes there) for each string input, free text aside."""
    for component, (_, args_type, base) in COMPONENTS.items():
        for path, kind in input_strings(args_type, base()):
            if path[-1] not in FREE_TEXT:
                yield component, path, kind


def field_id(component: str, path: Path_, kind: str) -> str:
    return f"{component}-{'.'.join(map(str, path))}-{kind}"


COMPONENT_FIELDS = [pytest.param(*field, id=field_id(*field)) for field in component_fields()]


def field_name(path: Path_, wire: bool) -> str:
    """The input's path as the caller wrote it: snake_case in Python, camelCase over the wire."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = camel_case(part) if wire else part
            text += f".{name}" if text else name
    return text


def test_every_component_has_string_fields_in_the_corpus() -> None:
    covered = {case.values[0] for case in COMPONENT_FIELDS}
    assert covered == set(COMPONENTS)


@pytest.mark.parametrize(("component", "path", "kind"), COMPONENT_FIELDS)
def test_a_python_constructor_refuses_each_hostile_string_naming_the_input(
    component: str, path: Path_, kind: str
) -> None:
    # One program under a fresh mock engine tries every hostile string in the input.
    cls, _, base = COMPONENTS[component]
    named = field_name(path, wire=False)
    not_refused: list[tuple[str, object]] = []

    def program() -> None:
        for index, value in enumerate(HOSTILE):
            try:
                cls(f"hostile-{index}", with_string(base(), path, kind, value))
            except ComponentInputError as caught:
                if not any(snake_path(loc).startswith(named) for loc, _ in caught.problems):
                    not_refused.append((value, caught.problems))
            else:
                not_refused.append((value, "accepted"))

    monitor = RecordingMonitor(EchoMocks())
    run_program(program, {}, [], stack="test", monitor=monitor)
    assert not_refused == []
    assert monitor.registrations == []


@pytest.fixture(scope="module")
def monitor() -> Iterator[Served]:
    """One resource monitor for the module's previews, as the engine keeps one per deployment."""
    with serving(ResourceMonitor(PROJECT, STACK, preview=True)) as served:
        yield served


@pytest.fixture
def preview(provider: provider_pb2_grpc.ResourceProviderStub, monitor: Served) -> Deployment:
    """A preview on the module's monitor, with nothing registered yet."""
    deployment = Deployment(provider, monitor)
    deployment.monitor.registrations.clear()
    deployment.monitor.outputs.clear()
    return deployment


@pytest.mark.parametrize(("component", "path", "kind"), COMPONENT_FIELDS)
def test_the_provider_refuses_each_hostile_string_naming_the_input(
    preview: Deployment, component: str, path: Path_, kind: str
) -> None:
    # One Construct per hostile string, each refused on its own before anything is registered.
    _, args_type, base = COMPONENTS[component]
    named = field_name(path, wire=True)
    not_refused: list[tuple[str, object]] = []
    for value in HOSTILE:
        args = wire_names(with_string(base(), path, kind, value), args_type)
        try:
            preview.construct(f"llm-infra:index:{component}", "hostile", args)
        except grpc.RpcError as caught:
            paths = [where for where, _ in input_errors(caught)]
            refused = caught.code() == grpc.StatusCode.INVALID_ARGUMENT
            if not refused or not any(where.startswith(named) for where in paths):
                not_refused.append((value, (caught.code(), caught.details())))
        else:
            not_refused.append((value, "accepted"))
    assert not_refused == []
    assert preview.monitor.registrations == []


# -- strings the grammars admit: they render and run as data ---------------------------------
