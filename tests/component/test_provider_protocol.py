"""Each component constructed through `provider/` over gRPC, as the Pulumi engine drives it.

The engine sends a component's inputs as a protobuf Struct: numbers as doubles, values it does
not know yet (a preview) as the unknown sentinel with the resources they come from, secrets as
secret values. The provider registers the children with the engine's resource monitor (here an
in-process one) and answers with the component's outputs and what each depends on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import pytest
import yaml
from pulumi.output import Unknown
from pulumi.runtime import rpc

from components.k8s.pod_security import DEFAULT_UID
from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.model_store.inputs import GgufModelStoreArgs, ModelVolume
from components.payloads.fetcher import fetch_document, lock_digest
from infra.config.feeds import fed
from infra.render import clean
from infra.targets.kubernetes import server_args, store_args
from tests.conftest import stack_values, strix, unlocked_source
from tests.support.component_inputs import wire_names
from tests.support.provider_deploy import (
    API_KEY,
    EXAMPLE,
    HF_TOKEN,
    LLAMA,
    NAMESPACE_URN,
    STORE,
    VLLM,
    Deployment,
    input_errors,
    vllm_inputs,
)
from tests.support.provider_host import (
    ROOT,
    UNKNOWN,
    output_dependencies,
    outputs,
    secret,
)
from tests.support.resource_monitor import Registration


def container(deployment: Registration) -> dict[str, Any]:
    (server,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = server
    return result


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def plain_texts(value: Any) -> Iterator[str]:
    """Every string in a value outside its secrets (what the engine may show and store)."""
    if rpc.is_rpc_secret(value):
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from plain_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from plain_texts(item)
    elif hasattr(value, "text"):  # a StringAsset
        yield str(value.text)


def leaked(deployment: Deployment, text: str) -> list[str]:
    """Names of registrations that show `text` outside a secret."""
    return [
        r.name
        for r in deployment.monitor.registrations
        if any(text in item for item in plain_texts(r.inputs))
    ]


def test_yaml_example_constructs_with_integers_from_doubles(up: Deployment) -> None:
    store = up.store()
    server = up.server(store)
    children = up.children(server.urn)
    assert {name: r.type for name, r in children.items()} == {
        "qwen-deployment": "kubernetes:apps/v1:Deployment",
        "qwen-service": "kubernetes:core/v1:Service",
    }
    argv = container(children["qwen-deployment"])["args"]
    # The wire carried 8080.0 and 37.0; the user wrote 8080 and 37.
    assert (flag(argv, "--port"), flag(argv, "-ngl")) == ("8080", "37")
    assert (flag(argv, "-c"), flag(argv, "-np"), flag(argv, "--threads")) == ("32768", "2", "4")
    assert not any(re.fullmatch(r"\d+\.0", arg) for arg in argv), argv
    assert outputs(server) == {
        "url": "http://qwen.llm.svc:8080",
        "serviceName": "qwen",
        "alias": "qwen3-8b",
    }
    volumes = children["qwen-deployment"].inputs["spec"]["template"]["spec"]["volumes"]
    claim = next(v for v in volumes if v["name"] == "models")["persistentVolumeClaim"]
    assert claim["claimName"] == outputs(store)["claimName"] == "models"


def test_outputs_depend_on_the_children_that_make_them_true(up: Deployment) -> None:
    store = up.store()
    server = up.server(store)
    store_children = {name: r.urn for name, r in up.children(store.urn).items()}
    server_children = {name: r.urn for name, r in up.children(server.urn).items()}
    assert output_dependencies(store) == {
        "claimName": {store_children["models-pvc"]},
        "fetcherConfigMap": {store_children["models-fetcher"]},
        "lockDigest": {store_children["models-fetch"]},
        "modelPath": {store_children["models-fetch"]},
    }
    assert output_dependencies(server) == {
        "url": {server_children["qwen-service"]},
        "serviceName": {server_children["qwen-service"]},
        "alias": {server_children["qwen-deployment"]},
    }
    # The store's claim output, passed into `model`, makes the Deployment depend on the store.
    deployment = up.children(server.urn)["qwen-deployment"]
    assert store.urn in deployment.property_dependencies["spec"]
    assert store.urn in deployment.dependencies
    assert up.monitor.outputs[server.urn]["url"] == "http://qwen.llm.svc:8080"


def test_unknown_namespace_and_claim_give_unknown_outputs_at_preview(preview: Deployment) -> None:
    store = preview.store(namespace=UNKNOWN)
    server = preview.server(
        store,
        input_dependencies={"namespace": [NAMESPACE_URN]},
        namespace=UNKNOWN,
    )
    state = outputs(server)
    assert isinstance(state["url"], Unknown) and isinstance(state["serviceName"], Unknown)
    assert state["alias"] == "qwen3-8b"
    assert isinstance(outputs(store)["claimName"], Unknown)
    deployment = preview.children(server.urn)["qwen-deployment"]
    assert {NAMESPACE_URN, store.urn} <= set(deployment.dependencies)
    assert not leaked(preview, "Output[")
    assert not leaked(preview, "pulumi.output")


def test_known_namespace_gives_the_exact_url_at_preview(preview: Deployment) -> None:
    server = preview.server(preview.store(), input_dependencies={"namespace": [NAMESPACE_URN]})
    assert outputs(server)["url"] == "http://qwen.llm.svc:8080"
    deployment = preview.children(server.urn)["qwen-deployment"]
    assert NAMESPACE_URN in deployment.property_dependencies["metadata"]


def test_api_key_is_a_secret_child_and_appears_nowhere_else(preview: Deployment) -> None:
    server = preview.server(preview.store(), apiKey=secret(API_KEY))
    children = preview.children(server.urn)
    key = children["qwen-api-key"]
    assert key.type == "kubernetes:core/v1:Secret"
    assert rpc.is_rpc_secret(key.inputs["stringData"])
    assert "/run/secrets/llama-server/api-key" in container(children["qwen-deployment"])["args"]
    assert leaked(preview, API_KEY) == []


def test_a_secret_sent_as_plain_text_is_still_kept_secret(preview: Deployment) -> None:
    server = preview.server(preview.store(), apiKey=API_KEY)
    assert rpc.is_rpc_secret(preview.children(server.urn)["qwen-api-key"].inputs["stringData"])
    assert leaked(preview, API_KEY) == []


def test_outputs_made_from_a_secret_stay_secret(preview: Deployment) -> None:
    server = preview.server(preview.store(), namespace=secret("llm"))
    state = outputs(server)
    assert rpc.is_rpc_secret(state["url"])
    assert rpc.unwrap_rpc_secret(state["url"]) == "http://qwen.llm.svc:8080"
    assert state["alias"] == "qwen3-8b"


def test_store_fetches_the_lock_with_integer_sizes_and_a_secret_token(up: Deployment) -> None:
    files = [
        {"path": f"Q/Model-0000{i}-of-00002.gguf", "name": f"Model-0000{i}-of-00002.gguf",
         "size": 16 * 2**20 * i, "sha256": str(i) * 64}
        for i in (1, 2)
    ]  # fmt: skip
    store = up.store(files=files, hfToken=secret(HF_TOKEN), parallelDownloads=4)
    children = up.children(store.urn)
    lock = json.loads(children["models-fetcher"].inputs["data"]["lock.json"])
    assert [f["size"] for f in lock["files"]] == [16 * 2**20, 32 * 2**20]
    assert '"size": 16777216' in children["models-fetcher"].inputs["data"]["lock.json"]
    (fetch,) = children["models-fetch"].inputs["spec"]["template"]["spec"]["containers"]
    assert flag(fetch["command"], "--parallel") == "4"
    token = next(e for e in fetch["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["name"] == "models-hf-token"
    assert rpc.is_rpc_secret(children["models-hf-token"].inputs["stringData"])
    assert leaked(up, HF_TOKEN) == []
    document = fetch_document("unsloth/Qwen3-8B-GGUF", "main", files)  # type: ignore[arg-type]
    assert outputs(store) == {
        "claimName": "models",
        "fetcherConfigMap": children["models-fetcher"].inputs["metadata"]["name"],
        "lockDigest": lock_digest(document),
        "modelPath": "/models/Model-00001-of-00002.gguf",
    }


def test_vllm_server_renders_integers_and_keeps_its_keys_secret(up: Deployment) -> None:
    server = up.construct(VLLM, "mi300x", vllm_inputs())
    children = up.children(server.urn)
    compose = yaml.safe_load(children["mi300x-compose"].inputs["source"].text)
    command = compose["services"]["vllm"]["command"]
    assert flag(command, "--port") == "8000" and flag(command, "-tp") == "1"
    assert flag(command, "--kv-cache-memory-bytes") == "20000000000"
    assert json.loads(flag(command, "--speculative-config"))["num_speculative_tokens"] == 7
    assert compose["services"]["vllm"]["healthcheck"]["start_period"] == "1800s"
    lock = children["mi300x-lock"].inputs["source"].text
    assert json.loads(lock)["files"][0]["size"] == 1234 and '"version": 1' in lock
    for name, child in children.items():
        assert rpc.is_rpc_secret(child.inputs["connection"]), name
    connection = rpc.unwrap_rpc_secret(children["mi300x-up"].inputs["connection"])
    assert connection["port"] == 2222 and connection["host"] == "203.0.113.10"
    assert rpc.is_rpc_secret(children["mi300x-env-file"].inputs["stdin"])
    assert leaked(up, API_KEY) == [] and leaked(up, "b3BlbnNzaC1rZXktdjEAAAA-secret") == []
    assert outputs(server) == {
        "url": "https://llm.example.com",
        "servedModelName": "deepseek-v4-flash-0731",
    }
    check = children["mi300x-check"].urn
    assert output_dependencies(server) == {"url": {check}, "servedModelName": {check}}


def test_a_plain_input_that_is_not_known_is_refused_naming_it(preview: Deployment) -> None:
    flags = {**EXAMPLE["resources"]["qwen"]["properties"]["flags"], "port": UNKNOWN}
    with pytest.raises(grpc.RpcError) as caught:
        preview.server(preview.store(), flags=flags)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ((path, reason),) = input_errors(caught.value)
    assert path == "flags.port" and "must be known before the deployment" in reason
    assert [r.name for r in preview.monitor.registrations if r.type == LLAMA] == []


FLAGS = EXAMPLE["resources"]["qwen"]["properties"]["flags"]


@pytest.mark.parametrize(
    ("overrides", "path", "reason"),
    [
        ({"flags": {**FLAGS, "gpuLayers": 37.5}}, "flags.gpuLayers", "37.5 is not a whole number"),
        ({"flags": {**FLAGS, "gpuLayers": float("nan")}}, "flags.gpuLayers", "nan is not a number"),
        ({"flags": {**FLAGS, "gpuLayers": float("inf")}}, "flags.gpuLayers", "inf is not a number"),
        ({"flags": {**FLAGS, "gpuLayers": 1e30}}, "flags.gpuLayers", "1e+30 is not a number"),
        ({"apikey": "sk-x"}, "apikey",
         "'apikey' is not an input of LlamaCppVulkanServer (did you mean 'apiKey'?)"),
        ({"flags": {**FLAGS, "gpuLayer": 5}}, "flags.gpuLayer",
         "'gpuLayer' is not an input of flags (did you mean 'gpuLayers'?)"),
    ],
    ids=["fraction", "nan", "inf", "huge", "undeclared", "undeclared-nested"],
)  # fmt: skip
def test_an_input_the_schema_refuses_is_refused_at_once_naming_it_as_written(
    preview: Deployment, overrides: dict[str, Any], path: str, reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        preview.server(preview.store(), **overrides)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    errors = input_errors(caught.value)
    assert (path, reason) in [(p, r[: len(reason)]) for p, r in errors], errors
    assert f"{path}: " in caught.value.details()
    assert [r.name for r in preview.monitor.registrations if r.type == LLAMA] == []


def test_a_refusal_found_inside_an_apply_keeps_its_inputs_path(preview: Deployment) -> None:
    # `connection` holds a secret (the SSH key): it is resolved, and validated, in an apply.
    inputs = vllm_inputs()
    inputs["connection"]["port"] = 99999
    with pytest.raises(grpc.RpcError) as caught:
        preview.construct(VLLM, "mi300x", inputs)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ((path, reason),) = input_errors(caught.value)
    assert path == "connection.port" and "less than or equal to 65535" in reason
    assert "connection.port: 99999" in caught.value.details()


def test_a_missing_required_input_is_refused_naming_it(preview: Deployment) -> None:
    properties = dict(EXAMPLE["resources"]["models"]["properties"])
    del properties["volumeSize"]
    with pytest.raises(grpc.RpcError) as caught:
        preview.construct(STORE, "models", properties)
    assert [path for path, _ in input_errors(caught.value)] == ["volumeSize"]


def test_plugin_manifest_uses_only_options_the_python_host_reads() -> None:
    manifest = yaml.safe_load((ROOT / "provider" / "PulumiPlugin.yaml").read_text())
    assert set(manifest) == {"runtime"}
    runtime = manifest["runtime"]
    assert runtime["name"] == "python"
    assert set(runtime["options"]) <= {"toolchain", "virtualenv", "typechecker"}
    assert runtime["options"]["toolchain"] in ("pip", "poetry", "uv")
    # The virtualenv is the plugin's own, beside its requirements, which install the components.
    assert not runtime["options"]["virtualenv"].startswith(("/", ".."))
    requirements = (ROOT / "provider" / "requirements.txt").read_text().splitlines()
    assert "-e .." in requirements


def test_nested_alert_thresholds_arrive_as_integers_in_the_rules(up: Deployment) -> None:
    metrics = {
        "monitorKind": "ServiceMonitor",
        "rules": True,
        "dashboard": True,
        "alerts": {"stallMinutes": 15, "forMinutes": 3, "kvCacheRatio": 0.8},
        "reference": {"decodeTps": 200.5, "aggregateTps": {"8": 500}},
    }
    server = up.server(up.store(), metrics=metrics)
    children = up.children(server.urn)
    (group,) = children["qwen-alerts"].inputs["spec"]["groups"]
    rules = {rule["alert"]: rule for rule in group["rules"]}
    # The wire carried 3.0 and 15.0: the rules say 3m and 15m, never 3.0m.
    assert rules["LlmServerDown"]["for"] == "3m"
    assert "[15m]" in rules["LlmNoTokensWhileRequestsWait"]["expr"]
    assert "0.8" in rules["LlmSlotContextNearlyFull"]["expr"]
    (text,) = children["qwen-dashboard"].inputs["data"].values()
    board = json.loads(text)
    steps = [s["value"] for p in board["panels"] for s in
             ((p.get("fieldConfig") or {}).get("defaults", {}).get("thresholds") or {})
             .get("steps", []) if s.get("value") is not None]  # fmt: skip
    assert 200.5 in steps and 500 in steps


def test_the_stack_files_inputs_through_the_provider_render_what_the_stack_file_renders(
    up: Deployment,
) -> None:
    """Same builders behind both doors: each child gets exactly the golden render's inputs."""
    golden = json.loads((ROOT / "tests/golden/strix-halo/resources.json").read_text())
    stack = strix(stack_values("strix-halo"))
    source = unlocked_source(stack)
    store_inputs = store_args(stack, fed(stack), source, None)
    store = up.construct(STORE, "models", wire_names(store_inputs, GgufModelStoreArgs))
    built = outputs(store)
    volume: ModelVolume = {
        "claim_name": built["claimName"],
        "fetcher_config_map": built["fetcherConfigMap"],
        "check_image": store_inputs["fetch_image"],
        "run_as_user": DEFAULT_UID,
        "model_file": store_inputs["files"][0]["name"],
        "model_bytes": None,
    }
    server_inputs: LlamaCppVulkanServerArgs = {
        **server_args(stack, fed(stack), source, volume),
        # As the stack's target passes it (store.upgrade: replace).
        "stop_before_model_change": stack.store.upgrade == "replace",
    }
    name = stack.server.resource_name or server_inputs["flags"]["alias"]
    server = up.construct(LLAMA, name, wire_names(server_inputs, LlamaCppVulkanServerArgs))
    for component, parent in (("models", store.urn), (name, server.urn)):
        through_provider = {
            n: clean(r.inputs) for n, r in up.children(parent).items() if n != "namespace"
        }
        from_stack_file = {r["name"]: r["inputs"] for r in golden if r["parent"] == component}
        assert len(from_stack_file) >= 4, component
        assert through_provider.keys() == from_stack_file.keys()
        for child, inputs in from_stack_file.items():
            assert through_provider[child] == inputs, child


@pytest.mark.parametrize(
    ("component", "words", "reason"),
    [
        ("llama", ["--tools", "all"], "run tools or commands"),
        ("llama", ["--spec-draft-hf", "x/y"], "downloads a model at start"),
        ("vllm", ["--trust-remote-code"], "loads Python code"),
    ],
)
def test_an_extra_arg_that_opens_the_server_is_refused_over_the_provider(
    preview: Deployment, component: str, words: list[str], reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        if component == "llama":
            preview.server(preview.store(), extraArgs=words)
        else:
            preview.construct(VLLM, "mi300x", {**vllm_inputs(), "extraArgs": words})
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    errors = input_errors(caught.value)
    assert [path for path, _ in errors] == ["extraArgs[0]"], errors
    assert "is refused: " in errors[0][1] and reason in errors[0][1]
