"""The examples: the Python one runs under mocks; the YAML one speaks the provider's schema.

`test_provider_protocol.py` constructs the YAML example's values through the provider itself.
"""

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.provider import LlmInfraProvider
from infra.render import run_program
from tests.support.examples import EXAMPLES, python_example


def test_python_example_registers_the_store_and_server() -> None:
    example = python_example()
    rendered = run_program(example.main, {}, [], stack="dev", project="llm-infra-example-python")
    types = {r["type"] for r in rendered.resources}
    assert {"llm-infra:index:GgufModelStore", "kubernetes:apps/v1:Deployment"} <= types
    assert rendered.outputs["url"] == "http://qwen3-8b.llm.svc:8080"
    deployment = next(r for r in rendered.resources if r["type"] == "kubernetes:apps/v1:Deployment")
    args = deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["-m", "/models/Qwen3-8B-Q4_K_M.gguf"]


def test_python_example_url_depends_on_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer of the exported URL waits for the Service, not just for the component."""
    example = python_example()
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))

    def program() -> None:
        example.main()
        k8s.core.v1.ConfigMap("consumer", data={"url": exported["url"]})

    rendered = run_program(program, {}, [], stack="dev", project="llm-infra-example-python")
    consumer = next(r for r in rendered.resources if r["name"] == "consumer")
    assert consumer["inputs"]["data"] == {"url": "http://qwen3-8b.llm.svc:8080"}
    assert consumer["options"]["dependsOn"] == ["qwen3-8b-service"]


def _properties(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in spec:
        return dict(schema["types"][spec["$ref"].removeprefix("#/types/")])
    return spec


def _check(schema: dict[str, Any], spec: dict[str, Any], value: Any, where: str) -> None:
    if isinstance(value, str) and "${" in value:
        # Another resource's output: only an input that takes outputs may receive it.
        assert not spec.get("plain"), f"{where}: {value} goes into a plain input"
    resolved = _properties(schema, spec)
    if "properties" in resolved and isinstance(value, dict):
        unknown = set(value) - set(resolved["properties"])
        assert not unknown, f"{where}: {unknown} not in the schema"
        missing = set(resolved.get("required", [])) - set(value)
        assert not missing, f"{where}: {missing} required"
        for key, item in value.items():
            _check(schema, resolved["properties"][key], item, f"{where}.{key}")


@pytest.mark.parametrize("name", ["models", "qwen"])
def test_yaml_example_uses_only_schema_properties_and_outputs_where_allowed(name: str) -> None:
    schema = json.loads(LlmInfraProvider().schema or "{}")
    program = yaml.safe_load((EXAMPLES / "yaml-k3s" / "Pulumi.yaml").read_text())
    resource = program["resources"][name]
    spec = schema["resources"][resource["type"]]
    properties = resource["properties"]
    assert set(spec["requiredInputs"]) <= set(properties)
    for key, value in properties.items():
        assert key in spec["inputProperties"], f"{name}.{key} is not an input"
        _check(schema, spec["inputProperties"][key], value, f"{name}.{key}")
