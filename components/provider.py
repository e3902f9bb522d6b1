"""What the component provider hosts, for other Pulumi languages (`provider/`).

The SDK's ComponentProvider infers the schema from the components' type annotations: the same
Args types the components validate their inputs with. The SDK's analyzer knows no
`Annotated[...]` (how a grammar or a range is attached) and no `Literal[...]`; here a grammar
is read as its base type and a Literal becomes the schema's enum, mechanically. This subclass
adds what annotations cannot say, and maps inputs in every form the engine sends them:

- Secret inputs are `secret` in the schema, so every SDK and the engine treat them as secrets.
- An input's declared default (`Default` in its annotation) is the property's `default` where
  the schema takes one (a boolean, number or string), else a sentence of its description.
- The model volume is typed as known strings for the builders, yet the server resolves it as an
  input: other languages pass a store's `claimName` and `fetcherConfigMap` outputs into it.
- An object input that depends on another resource, or holds a secret, reaches the provider as
  one output; the SDK's own mapping then loses its fields. Here it is mapped inside an apply,
  and a plain input (one that decides what a component creates) that is not known is refused.
Numbers stay as the wire has them (doubles): the components make integers of them themselves.
A component's refusal of its inputs reaches the engine as InputPropertiesError, each problem
under the input's schema (camelCase) path.
"""

import difflib
import inspect
import json
import math
import re
from importlib import metadata
from typing import Annotated, Any, Literal, get_args, get_origin

import pulumi
from pulumi.output import Unknown
from pulumi.provider import ConstructResult, Provider
from pulumi.provider.experimental.analyzer import (
    Analyzer,
    EnumValueDefinition,
    PropertyDefinition,
    PropertyType,
    TypeDefinition,
)
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.experimental.schema import generate_schema
from pulumi.provider.experimental.util import camel_case
from pulumi.provider.server import ComponentInitError

from components.field_docs import field_docs
from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.llamacpp.rpc_worker import LlamaCppRpcWorker
from components.llamacpp.server import LlamaCppVulkanServer
from components.model_store.component import GgufModelStore
from components.model_store.inputs import GgufModelStoreArgs, ModelVolume
from components.validation import (
    INPUTS_HEADING,
    SCHEMA_NAMES,
    ComponentInputError,
    declared_defaults,
    named,
    schema_path,
)
from components.vllm.component import VllmRocmServer
from components.vllm.inputs import SshConnection, VllmRocmServerArgs

PACKAGE = "llm-infra"
COMPONENTS: list[type[pulumi.ComponentResource]] = [
    GgufModelStore,
    LlamaCppVulkanServer,
    LlamaCppRpcWorker,
    VllmRocmServer,
]

SECRET_INPUTS: dict[type, tuple[str, ...]] = {
    GgufModelStoreArgs: ("hf_token",),
    LlamaCppVulkanServerArgs: ("api_key",),
    VllmRocmServerArgs: ("api_key",),
    SshConnection: ("private_key",),
}
"""Inputs that are secrets, by the type that declares them."""

OUTPUT_INPUTS: dict[type, tuple[str, ...]] = {
    LlamaCppVulkanServerArgs: ("model",),
    ModelVolume: ("claim_name", "fetcher_config_map"),
}
"""Inputs typed as known values (the builders read them so) that the component resolves as
outputs: the schema lets other languages pass another resource's outputs into them."""


def _version() -> str:
    try:
        return metadata.version("llm-infra")
    except metadata.PackageNotFoundError:
        return "0.0.0"


VERSION = _version()


def _pascal(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", text))


class ArgsAnalyzer(Analyzer):
    """The SDK's analyzer, reading `Annotated[X, ...]` as X and a `Literal` as an enum type."""

    def analyze_property(
        self,
        arg: Any,
        typ: type,
        name: str,
        *,
        can_be_plain: bool,
        is_component_output: bool,
        optional: bool | None = None,
    ) -> PropertyDefinition:
        """One property; grammars and ranges stay with the validation, enums go in the schema."""
        flags = {"can_be_plain": can_be_plain, "is_component_output": is_component_output}
        origin = get_origin(arg)
        if origin is Annotated:
            return self.analyze_property(get_args(arg)[0], typ, name, optional=optional, **flags)
        if origin is dict and get_args(arg)[0] is not str:
            value = get_args(arg)[1]
            return self.analyze_property(dict[str, value], typ, name, optional=optional, **flags)  # type: ignore[valid-type]
        if origin is Literal:
            enum = self._enum(get_args(arg), name, typ)
            return PropertyDefinition(
                ref=f"#/types/{self.name}:index:{enum.name}",
                optional=bool(optional),
                plain=True if can_be_plain else None,
                description=self.get_docstring(typ, name),
            )
        return super().analyze_property(arg, typ, name, optional=optional, **flags)

    def get_docstring(self, typ: type, name: str) -> str | None:
        """The field's docstring, also where `typ` inherits the field (the SDK reads only the
        class's own body)."""
        return field_docs(typ).get(name)

    def _enum(self, values: tuple[Any, ...], field: str, typ: type) -> TypeDefinition:
        name = _pascal(field)
        known = self.type_definitions.get(name)
        if known is not None and known.enum is not None:
            if [member.value for member in known.enum] != list(values):
                raise ValueError(f"two enums named {name} with different values ({typ.__name__})")
            return known
        enum = TypeDefinition(
            name=name,
            type=PropertyType.STRING,
            properties={},
            properties_mapping={},
            module=typ.__module__,
            python_type=str,
            description=f"The values `{camel_case(field)}` takes.",
            enum=[EnumValueDefinition(name=_pascal(str(v)), value=v) for v in values],
        )
        self.type_definitions[name] = enum
        return enum


class LlmInfraProvider(ComponentProvider):
    """The SDK's component provider for COMPONENTS, with secrets and output-taking inputs."""

    def __init__(self, version: str = VERSION) -> None:
        # ComponentProvider.__init__ with the analyzer that reads the validating Args types.
        self._name = PACKAGE
        self.analyzer = ArgsAnalyzer(PACKAGE)
        result = self.analyzer.analyze(COMPONENTS)
        self._components = {component.__name__: component for component in COMPONENTS}
        self._component_defs = result["component_definitions"]
        self._type_defs = result["type_definitions"]
        self._external_enum_types = result["external_enum_types"]
        self._dependencies = sorted(result["dependencies"], key=lambda d: f"{d.name}{d.version}")
        for type_def in self._type_defs.values():
            # help() lists the fields in the type's docstring; the schema describes each field.
            if type_def.description:
                type_def.description = type_def.description.split(INPUTS_HEADING)[0]
        for cls, fields in OUTPUT_INPUTS.items():
            properties, _ = self._declared(cls)
            for field in fields:
                properties[camel_case(field)].plain = None
        spec = generate_schema(
            PACKAGE, version, None, self._component_defs, self._type_defs, self._dependencies
        ).to_json()
        for cls, fields in SECRET_INPUTS.items():
            _, where = self._declared(cls)
            section, token, key = where
            for field in fields:
                spec[section][token][key][camel_case(field)]["secret"] = True
        spec = _clean_descriptions(spec)
        for cls in self._args_types():
            _, (section, token, key) = self._declared(cls)
            for field, value in declared_defaults(cls).items():
                _schema_default(spec[section][token][key][camel_case(field)], value)
        Provider.__init__(self, version, json.dumps(spec))

    def _args_types(self) -> list[type]:
        """Every TypedDict of inputs in the schema: the components' Args and the nested ones."""
        component_args = [inspect.get_annotations(c.__init__)["args"] for c in COMPONENTS]
        nested = [
            type_def.python_type
            for type_def in self._type_defs.values()
            if type_def.enum is None and isinstance(type_def.python_type, type)
        ]
        return [*component_args, *nested]

    def construct(
        self,
        name: str,
        resource_type: str,
        inputs: Any,
        options: pulumi.ResourceOptions | None = None,
    ) -> ConstructResult:
        """The SDK's construct; a refusal of the inputs is attributed to each input."""
        # Problems found now, or when an input resolves later, name inputs in camelCase.
        names = SCHEMA_NAMES.set(True)
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as exc:
            if not isinstance(exc.inner, ComponentInputError):
                raise
            refusal = exc.inner
            errors: list[pulumi.InputPropertyErrorDetails] = [
                {"property_path": schema_path(loc), "reason": named(message, schema_path)}
                for loc, message in refusal.problems
            ]
            lines = "".join(f"\n{e['property_path']}: {e['reason']}" for e in errors)
            raise pulumi.InputPropertiesError(
                f"invalid inputs of {refusal.component} {name!r}:{lines}", errors
            ) from None
        finally:
            SCHEMA_NAMES.reset(names)

    def _declared(self, cls: type) -> tuple[dict[str, PropertyDefinition], tuple[str, str, str]]:
        """The property definitions of an Args or nested type, and where the schema has them."""
        for component in COMPONENTS:
            if inspect.get_annotations(component.__init__).get("args") is cls:
                token = f"{PACKAGE}:index:{component.__name__}"
                return self._component_defs[component.__name__].inputs, (
                    "resources",
                    token,
                    "inputProperties",
                )
        token = f"{PACKAGE}:index:{cls.__name__}"
        return self._type_defs[cls.__name__].properties, ("types", token, "properties")

    def map_input_properties(
        self,
        inputs: Any,
        properties: dict[str, PropertyDefinition],
        mapping: dict[str, str],
        component_name: str,
        property_path: str,
    ) -> dict[str, Any]:
        """Schema names to Python names, required inputs checked, whatever form values take."""
        mapped: dict[str, Any] = {}
        if isinstance(inputs, dict):
            unknown = sorted(key for key in inputs if key not in properties)
            if unknown:
                raise _refused(
                    component_name,
                    [
                        (
                            f"{property_path}.{key}" if property_path else key,
                            f"'{key}' is not an input of "
                            f"{property_path or component_name}{_did_you_mean(key, properties)}",
                        )
                        for key in unknown
                    ],
                )
        for schema_name, prop in properties.items():
            path = f"{property_path}.{schema_name}" if property_path else schema_name
            value = inputs.get(schema_name) if isinstance(inputs, dict) else None
            if value is None:
                if not prop.optional:
                    raise _refused(component_name, [(path, f"Missing required input '{path}'")])
                continue
            mapped[mapping[schema_name]] = self._map_value(value, prop, component_name, path)
        return mapped

    def _map_value(
        self, value: Any, prop: PropertyDefinition, component_name: str, path: str
    ) -> Any:
        if prop.plain and isinstance(value, pulumi.Output | Unknown):
            raise _refused(
                component_name,
                [
                    (
                        path,
                        f"'{path}' must be known before the deployment (it decides what "
                        f"'{component_name}' creates): pass a value, not another resource's "
                        "output",
                    )
                ],
            )
        if isinstance(value, float) and not isinstance(value, bool):
            if not math.isfinite(value) or abs(value) > MAX_NUMBER:
                raise _refused(
                    component_name,
                    [(path, f"{value!r} is not a number an input takes (finite, at most 2^53)")],
                )
            if prop.type == PropertyType.INTEGER and not value.is_integer():
                raise _refused(component_name, [(path, f"{value!r} is not a whole number")])
        if isinstance(value, pulumi.Output):
            return value.apply(lambda known: self._map_value(known, prop, component_name, path))
        if isinstance(value, Unknown):
            return value
        if prop.ref:
            type_def = self.get_type_definition(prop)
            if type_def is None:
                return value
            if type_def.enum:
                return type_def.python_type(value)
            return self.map_input_properties(
                value, type_def.properties, type_def.properties_mapping, component_name, path
            )
        if prop.items and isinstance(value, list):
            return [
                self._map_value(item, prop.items, component_name, f"{path}[{index}]")
                for index, item in enumerate(value)
            ]
        if prop.additional_properties and isinstance(value, dict):
            return {
                key: self._map_value(
                    item, prop.additional_properties, component_name, f"{path}.{key}"
                )
                for key, item in value.items()
            }
        return value


MAX_NUMBER = float(2**53)
"""The largest number an input takes: the wire's doubles are exact integers up to here."""


def _refused(component: str, errors: list[tuple[str, str]]) -> pulumi.InputPropertiesError:
    """A refusal of inputs as the engine shows it: a message listing each input, and the
    inputs by path (as the caller wrote them)."""
    lines = "".join(f"\n{path}: {reason}" for path, reason in errors)
    return pulumi.InputPropertiesError(
        f"invalid inputs of {component}:{lines}",
        [{"property_path": path, "reason": reason} for path, reason in errors],
    )


def _did_you_mean(key: str, properties: dict[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(properties), n=1, cutoff=0.6)
    if not close:
        close = [name for name in properties if name.lower() == key.lower()]
    return (
        f" (did you mean '{close[0]}'?)" if close else f" (inputs: {', '.join(sorted(properties))})"
    )


_SCHEMA_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
}


def _schema_default(prop: dict[str, Any], value: Any) -> None:
    """A declared default into a property's spec: the schema's `default` for a boolean, number
    or string; for an enum, a list or an object (no place for it there), in its description."""
    kinds = _SCHEMA_TYPES.get(prop.get("type", ""), ())
    if isinstance(value, kinds) and (isinstance(value, bool) == (bool in kinds)):
        prop["default"] = value
    else:
        prop["description"] = f"{prop['description']}\nDefault: `{json.dumps(value)}`."


def _clean_descriptions(node: Any) -> Any:
    """Docstrings as descriptions, without their source indentation."""
    if isinstance(node, dict):
        return {
            key: inspect.cleandoc(item)
            if key == "description" and isinstance(item, str)
            else _clean_descriptions(item)
            for key, item in node.items()
            if not (key == "description" and item is None)
        }
    if isinstance(node, list):
        return [_clean_descriptions(item) for item in node]
    return node
