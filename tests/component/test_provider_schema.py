"""The component provider's inferred schema: every component with its inputs, outputs and docs."""

import json
from typing import Any

import pytest
from pulumi.provider.experimental.component import ComponentProvider

from components.provider import COMPONENTS, PACKAGE


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    provider = ComponentProvider(COMPONENTS, PACKAGE, version="0.1.0")
    assert provider.schema is not None
    document: dict[str, Any] = json.loads(provider.schema)
    return document


@pytest.mark.parametrize(
    ("token", "inputs", "outputs"),
    [
        (
            "llm-infra:index:GgufModelStore",
            {"namespace", "repo", "revision", "files", "volumeSize", "storageClass", "fetchImage"},
            {"claimName", "fetcherConfigMap", "lockDigest", "modelPath"},
        ),
        (
            "llm-infra:index:LlamaCppVulkanServer",
            {"namespace", "image", "flags", "model", "nodeSelector", "resources", "probes"},
            {"serviceName", "url", "alias"},
        ),
        (
            "llm-infra:index:VllmRocmServer",
            {"connection", "modelDir", "modelLock", "image", "flags", "caddy", "apiKey"},
            {"url", "servedModelName"},
        ),
    ],
)
def test_each_component_has_its_inputs_outputs_and_descriptions(
    schema: dict[str, Any], token: str, inputs: set[str], outputs: set[str]
) -> None:
    resource = schema["resources"][token]
    assert resource["isComponent"] is True
    assert resource["description"]
    assert inputs <= set(resource["inputProperties"])
    assert inputs <= set(resource["requiredInputs"])
    assert outputs == set(resource["properties"])
    for name, spec in resource["inputProperties"].items():
        assert spec.get("description"), f"{token}.{name} has no description"


def test_secrets_are_marked_secret_inputs(schema: dict[str, Any]) -> None:
    server = schema["resources"]["llm-infra:index:VllmRocmServer"]["inputProperties"]
    assert "apiKey" in server
    flags = schema["types"]["llm-infra:index:LlamaServerFlags"]["properties"]
    assert flags["gpuLayers"]["type"] == "integer"
    assert flags["cacheTypeK"]["description"].startswith("`--cache-type-k`")


def test_schema_names_the_package(schema: dict[str, Any]) -> None:
    assert schema["name"] == "llm-infra"
    assert schema["version"] == "0.1.0"
