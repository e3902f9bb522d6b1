"""The schema `provider/` serves over GetSchema: what `pulumi package add` generates SDKs from."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import empty_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from components.provider import PACKAGE, SECRET_INPUTS, VERSION

STORE = f"{PACKAGE}:index:GgufModelStore"
LLAMA = f"{PACKAGE}:index:LlamaCppVulkanServer"
VLLM = f"{PACKAGE}:index:VllmRocmServer"
RPC_WORKER = f"{PACKAGE}:index:LlamaCppRpcWorker"


@pytest.fixture(scope="module")
def schema(provider: provider_pb2_grpc.ResourceProviderStub) -> dict[str, Any]:
    response = provider.GetSchema(provider_pb2.GetSchemaRequest(version=0))
    document: dict[str, Any] = json.loads(response.schema)
    return document


def every_property(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`token.name` or `token.outputs.name`, spec) of every property in the schema."""
    for token, resource in schema["resources"].items():
        for name, spec in resource["inputProperties"].items():
            yield f"{token}.{name}", spec
        for name, spec in resource["properties"].items():
            yield f"{token}.outputs.{name}", spec
    for token, type_spec in schema["types"].items():
        for name, spec in type_spec.get("properties", {}).items():
            yield f"{token}.{name}", spec


@pytest.mark.parametrize(
    ("token", "inputs", "outputs"),
    [
        (
            STORE,
            {"repo", "files", "volumeSize"},
            {"claimName", "fetcherConfigMap", "lockDigest", "modelPath"},
        ),
        (
            LLAMA,
            {"image", "flags", "model", "resources"},
            {"serviceName", "url", "alias"},
        ),
        (
            RPC_WORKER,
            {"image", "head", "headPodLabels", "nodeSelector", "resources"},
            {"serviceName", "endpoint"},
        ),
        (
            VLLM,
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
    assert outputs == set(resource["required"])


def test_every_property_and_type_is_described_without_source_indentation(
    schema: dict[str, Any],
) -> None:
    for where, spec in every_property(schema):
        assert spec.get("description"), f"{where} has no description"
        assert "\n " not in spec["description"], f"{where}: {spec['description']!r}"
    for token, type_spec in schema["types"].items():
        assert type_spec.get("description"), f"{token} has no description"


def test_secrets_are_secret_in_the_schema_and_nothing_else_is(schema: dict[str, Any]) -> None:
    secret = {where for where, spec in every_property(schema) if spec.get("secret")}
    assert secret == {
        f"{STORE}.hfToken",
        f"{LLAMA}.apiKey",
        f"{VLLM}.apiKey",
        f"{PACKAGE}:index:SshConnection.privateKey",
    }
    # One table says which inputs are secret; each is a string that takes outputs.
    assert len(secret) == sum(len(fields) for fields in SECRET_INPUTS.values())
    for where, spec in every_property(schema):
        if where in secret:
            assert spec["type"] == "string" and not spec.get("plain"), where


@pytest.mark.parametrize(
    "where",
    [
        f"{STORE}.namespace",
        f"{STORE}.storageClass",
        f"{STORE}.hfToken",
        f"{LLAMA}.namespace",
        f"{LLAMA}.model",
        f"{PACKAGE}:index:ModelVolume.claimName",
        f"{PACKAGE}:index:ModelVolume.fetcherConfigMap",
        f"{VLLM}.connection",
        f"{PACKAGE}:index:SshConnection.host",
        f"{PACKAGE}:index:SshConnection.user",
        f"{PACKAGE}:index:SshConnection.port",
    ],
)
def test_inputs_that_come_from_other_resources_take_outputs(
    schema: dict[str, Any], where: str
) -> None:
    assert not dict(every_property(schema))[where].get("plain"), f"{where} is plain"


@pytest.mark.parametrize(
    "where",
    [
        f"{STORE}.files",
        f"{STORE}.fetchTimeoutSeconds",
        f"{STORE}.networkPolicy",
        f"{LLAMA}.flags",
        f"{LLAMA}.probes",
        f"{LLAMA}.verifyExpectations",
        f"{VLLM}.modelLock",
        f"{VLLM}.flags",
        f"{VLLM}.caddy",
        f"{VLLM}.patches",
    ],
)
def test_inputs_that_decide_what_is_created_are_plain(schema: dict[str, Any], where: str) -> None:
    assert dict(every_property(schema))[where].get("plain") is True, f"{where} takes outputs"


def test_outputs_are_never_plain(schema: dict[str, Any]) -> None:
    for where, spec in every_property(schema):
        if ".outputs." in where:
            assert not spec.get("plain"), where


def test_integers_are_integers_and_the_lock_is_typed(schema: dict[str, Any]) -> None:
    types = schema["types"]
    flags = types[f"{PACKAGE}:index:LlamaServerFlags"]["properties"]
    for name in ("port", "gpuLayers", "ctxSize", "parallel", "threads", "cacheRamMib"):
        assert flags[name]["type"] == "integer", name
    assert flags["temperature"]["type"] == "number"
    assert flags["cacheTypeK"]["description"].startswith("`--cache-type-k`")
    vllm_flags = types[f"{PACKAGE}:index:VllmFlags"]["properties"]
    assert vllm_flags["kvCacheMemoryBytes"]["type"] == "integer"
    lock = schema["resources"][VLLM]["inputProperties"]["modelLock"]
    assert lock["$ref"] == f"#/types/{PACKAGE}:index:ModelLock"
    files = types[f"{PACKAGE}:index:ModelLock"]["properties"]["files"]
    assert files["items"]["$ref"] == f"#/types/{PACKAGE}:index:ModelFile"
    assert types[f"{PACKAGE}:index:ModelFile"]["properties"]["size"]["type"] == "integer"
    port = types[f"{PACKAGE}:index:SshConnection"]["properties"]["port"]
    assert port["type"] == "integer"


def test_schema_names_the_package_and_its_version(
    schema: dict[str, Any], provider: provider_pb2_grpc.ResourceProviderStub
) -> None:
    assert schema["name"] == "llm-infra"
    assert schema["version"] == VERSION
    info = provider.GetPluginInfo(empty_pb2.Empty())
    assert info.version == VERSION


@pytest.mark.parametrize(
    ("where", "enum", "values"),
    [
        ("llm-infra:index:CaddySite.tls", "Tls", ["auto", "internal"]),
        (
            "llm-infra:index:LlamaCppVulkanServer.gpuAccess",
            "GpuAccess",
            ["privileged", "device-plugin"],
        ),
        (
            "llm-infra:index:LlamaServerFlags.cacheTypeK",
            "CacheTypeK",
            ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"],
        ),
        ("llm-infra:index:GgufModelStore.upgrade", "Upgrade", ["keep", "replace"]),
    ],
)
def test_inputs_of_a_fixed_set_are_enums_in_the_schema(
    schema: dict[str, Any], where: str, enum: str, values: list[str]
) -> None:
    spec = dict(every_property(schema))[where]
    assert spec["$ref"] == f"#/types/{PACKAGE}:index:{enum}"
    enum_type = schema["types"][f"{PACKAGE}:index:{enum}"]
    assert enum_type["type"] == "string"
    assert [member["value"] for member in enum_type["enum"]] == values


def test_type_descriptions_leave_out_the_field_list_help_shows(schema: dict[str, Any]) -> None:
    caddy = schema["types"][f"{PACKAGE}:index:CaddySite"]
    assert caddy["description"] == (
        "The HTTPS front door: site address, certificates and the client allowlist."
    )


def test_declared_defaults_reach_the_schema(schema: dict[str, Any]) -> None:
    # A scalar default is the property's `default`; the schema has none for an enum or a list.
    properties = dict(every_property(schema))
    assert properties[f"{LLAMA}.runAsUser"]["default"] == 10001
    assert properties[f"{PACKAGE}:index:SshConnection.port"]["default"] == 22
    assert properties[f"{STORE}.networkPolicy"]["default"] is True
    assert "default" not in properties[f"{LLAMA}.gpuAccess"]
    assert properties[f"{LLAMA}.gpuAccess"]["description"].endswith('Default: `"privileged"`.')
    assert properties[f"{VLLM}.patches"]["description"].endswith("Default: `[]`.")
    # An input without a default (absent means None) has none in the schema either.
    assert "default" not in properties[f"{LLAMA}.apiKey"]
    assert "Default:" not in properties[f"{LLAMA}.apiKey"]["description"]


def test_extra_args_are_a_documented_list_of_strings_of_both_servers(
    schema: dict[str, Any],
) -> None:
    for token in ("LlamaCppVulkanServer", "VllmRocmServer"):
        resource = schema["resources"][f"{PACKAGE}:index:{token}"]
        prop = resource["inputProperties"]["extraArgs"]
        assert prop["type"] == "array" and prop["items"]["type"] == "string"
        assert "extraArgs" not in resource.get("requiredInputs", [])
        assert "argv words" in prop["description"]
    flags = schema["types"][f"{PACKAGE}:index:LlamaServerFlags"]["properties"]
    assert flags["topK"]["type"] == "integer" and "`--top-k`" in flags["topK"]["description"]
    assert flags["minP"]["type"] == "number" and "`--min-p`" in flags["minP"]["description"]
