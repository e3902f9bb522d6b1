"""The JSON Schema of a stack file, generated from the stack models (one source), and one key's
documentation from it (`llm-infra schema`, `llm-infra explain KEY`).

A stack file is Pulumi's: `config:` maps `llm-infra:KEY` to the value of each top-level field
of the target's model (KubernetesStack, FleetStack or DockerHostStack); any value may instead be a
`secure:` ciphertext, and the secrets (hfToken, apiKey, sshPrivateKey) must be. Pulumi's own
keys (`encryptionsalt`, `secretsprovider`, `encryptedkey`, `environment`) are accepted as is.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, get_args

from pydantic import BaseModel

from components.field_docs import class_field_docs
from infra.config.base import LOCATION_KEYS, NAMESPACE, SECRET_KEYS
from infra.config.docker_host import DockerHostStack
from infra.config.fleet import FleetStack
from infra.config.kubernetes import KubernetesStack

SCHEMA_ID = "https://llm-infra.invalid/stack.schema.json"
STACK_MODELS: tuple[type[BaseModel], ...] = (KubernetesStack, FleetStack, DockerHostStack)
_SECURE = {
    "type": "object",
    "properties": {
        "secure": {"type": "string", "description": "the ciphertext `pulumi config` wrote"}
    },
    "required": ["secure"],
    "additionalProperties": False,
    "description": "a value Pulumi encrypted (`pulumi config set --secret`)",
}


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstring under each field of a model (and of its bases), by field name."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        docs.update(class_field_docs(cls))
    return docs


def _models(model: type[BaseModel], found: dict[str, type[BaseModel]]) -> None:
    """Every model reachable from `model`'s fields, by class name (as the schema titles them)."""
    if model.__name__ in found:
        return
    found[model.__name__] = model
    for info in model.model_fields.values():
        pending = [info.annotation]
        while pending:
            annotation = pending.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                _models(annotation, found)
            pending += get_args(annotation)


def _describe(node: dict[str, Any], model: type[BaseModel], prefix: str = "") -> None:
    """Give each property of a model's schema the docstring under its field."""
    docs = field_docs(model)
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        target = node.get("properties", {}).get(key)
        if target is not None and name in docs:
            target.setdefault("description", docs[name])


def _ecma_patterns(node: Any) -> None:
    """Named groups `(?P<x>` are Python's: plain groups work in editors' (ECMA) regexes too."""
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            node["pattern"] = re.sub(r"\(\?P<\w+>", "(", node["pattern"])
        for value in node.values():
            _ecma_patterns(value)
    elif isinstance(node, list):
        for value in node:
            _ecma_patterns(value)


def stack_file_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a `Pulumi.STACK.yaml` of this project."""
    definitions: dict[str, Any] = {}
    variants = []
    for model in STACK_MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        _describe(schema, model)
        nested: dict[str, type[BaseModel]] = {}
        _models(model, nested)
        for title, definition in schema.get("$defs", {}).items():
            if title in nested:
                _describe(definition, nested[title])
        definitions.update(schema.pop("$defs", {}))
        properties: dict[str, Any] = {
            f"{NAMESPACE}:{key}": {"anyOf": [value, {"$ref": "#/$defs/Secure"}]}
            for key, value in schema["properties"].items()
        }
        for key in SECRET_KEYS:
            properties[f"{NAMESPACE}:{key}"] = {"$ref": "#/$defs/Secure"}
        for key in LOCATION_KEYS:
            properties[f"{NAMESPACE}:{key}"] = {
                "type": "string",
                "description": "where the lock lives; unset: STACK.lock.json beside the file",
            }
        variants.append(
            {
                "title": model.__name__,
                "description": (model.__doc__ or "").strip().splitlines()[0],
                "type": "object",
                "properties": properties,
                "required": [f"{NAMESPACE}:{key}" for key in schema.get("required", [])],
                # Other namespaces (kubernetes:context, ...) belong to their providers.
                "patternProperties": {f"^(?!{NAMESPACE}:)[^:]+:.+$": {}},
                "additionalProperties": False,
            }
        )
    definitions["Secure"] = _SECURE
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "llm-infra stack file (Pulumi.STACK.yaml)",
        "description": "Generated by `llm-infra schema` from the stack models; do not edit.",
        "type": "object",
        "properties": {
            "config": {"anyOf": variants},
            "encryptionsalt": {"type": "string"},
            "secretsprovider": {"type": "string"},
            "encryptedkey": {"type": "string"},
            "environment": {},
        },
        "required": ["config"],
        "additionalProperties": False,
        "$defs": dict(sorted(definitions.items())),
    }
    _ecma_patterns(document)
    return document


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _children(schema: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas a value of `node` can be (through anyOf, arrays and maps)."""
    node = _resolve(schema, node)
    found = []
    for option in node.get("anyOf", []) + node.get("oneOf", []):
        found += _children(schema, option)
    if "items" in node:
        found += _children(schema, node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        found += _children(schema, node["additionalProperties"])
    if "properties" in node:
        found.append(node)
    return found


def _type(schema: dict[str, Any], node: dict[str, Any]) -> str:
    node = _resolve(schema, node)
    if "const" in node:
        return repr(node["const"])
    if "enum" in node:
        return " | ".join(repr(v) for v in node["enum"])
    options = node.get("anyOf") or node.get("oneOf")
    if options:
        return " | ".join(dict.fromkeys(_type(schema, o) for o in options))
    kind = node.get("type", "object" if "properties" in node else "any")
    if kind == "array" and "items" in node:
        return f"list of {_type(schema, node['items'])}"
    if "title" in node and "properties" in node:
        return f"{node['title']} (object)"
    return str(kind)


@functools.cache
def _read_only_schema() -> dict[str, Any]:
    """The schema, built once per process for the lookups that only read it."""
    return stack_file_schema()


def explain(key: str) -> list[str]:
    """What a person needs to know about a stack key (`server.contextSize`): per stack model
    that has it, its type, default, allowed values, whether required, and its docs. Empty when
    no model has the key."""
    schema = _read_only_schema()
    parts = key.removeprefix(f"{NAMESPACE}:").split(".")
    found: list[str] = []
    for variant in schema["properties"]["config"]["anyOf"]:
        nodes = [variant]
        names = [f"{NAMESPACE}:{parts[0]}", *parts[1:]]
        field: dict[str, Any] | None = None
        required = False
        for name in names:
            matches = [
                (n, n["properties"][name])
                for parent in nodes
                for n in _children(schema, parent)
                if name in n["properties"]
            ]
            if not matches:
                field = None
                break
            parent, field = matches[0]
            required = name in parent.get("required", [])
            nodes = [field]
        if field is None:
            continue
        if names[-1].startswith(f"{NAMESPACE}:"):
            field = field.get("anyOf", [field])[0]
        node = _resolve(schema, field)
        lines = [f"{key} ({variant['title']}): {_type(schema, field)}"]
        lines.append("  required" if required else f"  default: {field.get('default', 'none')}")
        for bound in ("minimum", "maximum", "exclusiveMinimum", "pattern"):
            if bound in node:
                lines.append(f"  {bound}: {node[bound]}")
        text = field.get("description") or node.get("description")
        if text:
            lines += [f"  {line}" for line in text.strip().splitlines()]
        found += lines
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _reference_rows(
    schema: dict[str, Any], node: dict[str, Any], prefix: str, depth: int
) -> list[str]:
    """Table rows for the keys of `node` and, nested, of the objects they hold."""
    rows = []
    for child in _children(schema, node)[:1] if depth else [node]:
        required = set(child.get("required", []))
        for name, value in child["properties"].items():
            key = prefix + name.removeprefix(f"{NAMESPACE}:")
            field = value["anyOf"][0] if depth == 0 and "anyOf" in value else value
            resolved = _resolve(schema, field)
            default = "" if name in required else f"`{json.dumps(field.get('default'))}`"
            text = field.get("description") or resolved.get("description") or ""
            mark = "yes" if name in required else ""
            rows.append(
                f"| `{key}` | {_cell(_type(schema, field))} | {mark} | {_cell(default)} | "
                f"{_cell(text)} |"
            )
            if depth < 4 and _children(schema, field):
                rows += _reference_rows(schema, field, key + ".", depth + 1)
    return rows


def configuration_reference() -> str:
    """docs/configuration.md: every key of every kind of stack, with its type, whether it is
    required, its default and its docs, from the same schema editors use."""
    schema = stack_file_schema()
    out = [
        "# Stack file reference",
        "",
        "Generated by `llm-infra schema --format markdown` from the stack models (the same source",
        "as `docs/stack.schema.json` and `llm-infra explain KEY`); do not edit.",
        "",
        "A stack file is `stacks/Pulumi.STACK.yaml`: under `config:`, each key below is written",
        "`llm-infra:KEY` (`llm-infra:server: {contextSize: 65536}`). Any value may be a Pulumi",
        "secret (`secure:`); `hfToken`, `apiKey` and `sshPrivateKey` must be.",
    ]
    for variant in schema["properties"]["config"]["anyOf"]:
        out += ["", f"## {variant['title']}", "", _cell(variant.get("description", "")), ""]
        out += ["| key | type | required | default | description |", "|---|---|---|---|---|"]
        out += _reference_rows(schema, variant, "", 0)
    return "\n".join(out) + "\n"
