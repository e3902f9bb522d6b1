"""What the component provider hosts, for other Pulumi languages (`provider/`).

The SDK's ComponentProvider infers the schema from the components' type annotations. This
subclass adds what annotations cannot say, and maps inputs in every form the engine sends them:

- Secret inputs are `secret` in the schema, so every SDK and the engine treat them as secrets.
- The model volume is typed as known strings for the builders, yet the server resolves it as an
  input: other languages pass a store's `claimName` and `fetcherConfigMap` outputs into it.
- An object input that depends on another resource, or holds a secret, reaches the provider as
  one output; the SDK's own mapping then loses its fields. Here it is mapped inside an apply,
  and a plain input (one that decides what a component creates) that is not known is refused.
Numbers stay as the wire has them (doubles): the components make integers of them themselves.
"""

import inspect
import json
from importlib import metadata
from typing import Any

import pulumi
from pulumi.output import Unknown
from pulumi.provider.experimental.analyzer import PropertyDefinition
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.experimental.schema import generate_schema
from pulumi.provider.experimental.util import camel_case

from components.llamacpp.rpc_worker import LlamaCppRpcWorker
from components.llamacpp.server import LlamaCppVulkanServer, LlamaCppVulkanServerArgs
from components.model_store.component import GgufModelStore, GgufModelStoreArgs, ModelVolume
from components.vllm.component import SshConnection, VllmRocmServer, VllmRocmServerArgs

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


class LlmInfraProvider(ComponentProvider):
    """The SDK's component provider for COMPONENTS, with secrets and output-taking inputs."""

    def __init__(self, version: str = VERSION) -> None:
        super().__init__(COMPONENTS, PACKAGE, version=version)
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
        self.schema = json.dumps(_clean_descriptions(spec))

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
        for schema_name, prop in properties.items():
            path = f"{property_path}.{schema_name}" if property_path else schema_name
            value = inputs.get(schema_name) if isinstance(inputs, dict) else None
            if value is None:
                if not prop.optional:
                    raise pulumi.InputPropertyError(
                        path, f"Missing required input '{path}' on '{component_name}'"
                    )
                continue
            mapped[mapping[schema_name]] = self._map_value(value, prop, component_name, path)
        return mapped

    def _map_value(
        self, value: Any, prop: PropertyDefinition, component_name: str, path: str
    ) -> Any:
        if prop.plain and isinstance(value, pulumi.Output | Unknown):
            raise pulumi.InputPropertyError(
                path,
                f"'{path}' must be known before the deployment (it decides what "
                f"'{component_name}' creates): pass a value, not another resource's output",
            )
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


def _clean_descriptions(node: Any) -> Any:
    """Docstrings as descriptions, without their source indentation."""
    if isinstance(node, dict):
        return {
            key: inspect.cleandoc(item)
            if key == "description" and isinstance(item, str)
            else _clean_descriptions(item)
            for key, item in node.items()
        }
    if isinstance(node, list):
        return [_clean_descriptions(item) for item in node]
    return node
