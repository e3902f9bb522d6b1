"""Components and the whole program under Pulumi mocks: what they register, with which options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components import GgufModelStore, LlamaCppVulkanServer, LlamaCppVulkanServerArgs
from infra import program
from infra.config import ConfigError, KubernetesStack, read_stack_file
from infra.config.feeds import fed
from infra.render import EchoMocks, RecordingMonitor, Rendered, run_program
from infra.targets.kubernetes import server_args, store_args
from tests.conftest import STACKS, strix, unlocked_source

TOKEN = "hf_live_token_value_123"


def store_and_server_args(
    stack: KubernetesStack, hf_token: pulumi.Output[str] | None = None
) -> tuple[GgufModelStore, LlamaCppVulkanServerArgs]:
    """The stack's model store, built inside a program, and its server's args reading from it."""
    source = unlocked_source(stack)
    store = GgufModelStore("models", store_args(stack, fed(stack), source, hf_token))
    return store, server_args(stack, fed(stack), source, store.model_volume)


def render_components(values: dict[str, Any], hf_token: str | None) -> Rendered:
    stack = strix(values)

    def build() -> None:
        token = pulumi.Output.secret(hf_token) if hf_token else None
        store, args = store_and_server_args(stack, token)
        LlamaCppVulkanServer("ds", args, opts=pulumi.ResourceOptions(depends_on=[store]))

    return run_program(build, {}, [], stack="test")


def by_name(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rendered.resources}


@pytest.fixture
def stack(strix_halo_values: dict[str, Any]) -> KubernetesStack:
    return strix(strix_halo_values)


def test_store_registers_protected_pvc_config_map_and_job(
    strix_halo_values: dict[str, Any],
) -> None:
    resources = by_name(render_components(strix_halo_values, None))
    assert resources["models"]["type"] == "llm-infra:index:GgufModelStore"
    pvc = resources["models-pvc"]
    assert pvc["type"] == "kubernetes:core/v1:PersistentVolumeClaim"
    assert pvc["parent"] == "models"
    assert pvc["options"]["protect"] is True
    job = resources["models-fetch"]
    assert job["type"] == "kubernetes:batch/v1:Job"
    assert sorted(job["options"]["dependsOn"]) == ["models-fetcher", "models-pvc"]
    deadline = job["inputs"]["spec"]["activeDeadlineSeconds"]
    assert int(job["options"]["customTimeouts"]["create"].rstrip("s")) > deadline
    assert "models-hf-token" not in resources


def test_server_deployment_waits_for_the_fetch_job(strix_halo_values: dict[str, Any]) -> None:
    resources = by_name(render_components(strix_halo_values, None))
    deployment = resources["ds-deployment"]
    assert deployment["parent"] == "ds"
    assert "models-fetch" in deployment["options"]["dependsOn"]
    deadline = deployment["inputs"]["spec"]["progressDeadlineSeconds"]
    assert int(deployment["options"]["customTimeouts"]["create"].rstrip("s")) > deadline
    pod = deployment["inputs"]["spec"]["template"]["spec"]
    config_map = resources["models-fetcher"]["inputs"]["metadata"]["name"]
    assert {"name": "fetcher", "configMap": {"name": config_map, "defaultMode": 0o444}} in pod[
        "volumes"
    ]
    assert resources["ds-service"]["inputs"]["spec"]["ports"][0]["port"] == 8080


def test_hf_token_becomes_a_secret_and_appears_nowhere_else(
    strix_halo_values: dict[str, Any],
) -> None:
    rendered = render_components(strix_halo_values, TOKEN)
    resources = by_name(rendered)
    secret = resources["models-hf-token"]
    assert secret["type"] == "kubernetes:core/v1:Secret"
    assert secret["inputs"]["stringData"] == {"token": "[secret]"}
    env = resources["models-fetch"]["inputs"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "models-hf-token",
                                                               "key": "token"}}} in env  # fmt: skip
    assert TOKEN not in json.dumps(rendered.resources)
    assert TOKEN not in json.dumps(rendered.manifests)


def test_component_outputs_are_typed_and_registered(stack: KubernetesStack) -> None:
    seen: dict[str, Any] = {}

    def build() -> None:
        store, args = store_and_server_args(stack)
        server = LlamaCppVulkanServer("ds", args)
        pulumi.Output.all(server.url, server.alias, store.model_path, store.claim_name).apply(
            lambda values: seen.update(zip(("url", "alias", "path", "claim"), values, strict=True))
        )

    run_program(build, {}, [], stack="test")
    assert seen == {
        "url": "http://ds.llm.svc:8080",
        "alias": "deepseek-v4-flash-0731",
        "path": "/models/DeepSeek-V4-Flash-0731-UD-IQ1_M-00001-of-00003.gguf",
        "claim": "models",
    }


def test_outputs_depend_on_the_children_that_make_them_true(stack: KubernetesStack) -> None:
    """A consumer of an output waits for the child it comes from, not only for the component."""

    def build() -> None:
        store, args = store_and_server_args(stack)
        server = LlamaCppVulkanServer("ds", args)
        for output, name in (
            (server.url, "url"),
            (server.alias, "alias"),
            (store.claim_name, "claim"),
            (store.model_path, "path"),
        ):
            k8s.core.v1.ConfigMap(f"uses-{name}", data={"value": output})

    resources = by_name(run_program(build, {}, [], stack="test"))
    assert {name: resources[f"uses-{name}"]["options"]["dependsOn"] for name in
            ("url", "alias", "claim", "path")} == {
        "url": ["ds-service"], "alias": ["ds-deployment"], "claim": ["models-pvc"],
        "path": ["models-fetch"],
    }  # fmt: skip


def test_namespace_from_another_resource_reaches_every_child(stack: KubernetesStack) -> None:
    def build() -> None:
        namespace = k8s.core.v1.Namespace("ns", metadata={"name": "llm-team"})
        source = unlocked_source(stack)
        args = store_args(stack, fed(stack), source, pulumi.Output.secret(TOKEN))
        store = GgufModelStore("models", {**args, "namespace": namespace.metadata.name})
        server = server_args(stack, fed(stack), source, store.model_volume)
        LlamaCppVulkanServer("ds", {**server, "namespace": namespace.metadata.name})

    rendered = run_program(build, {}, [], stack="test")
    children = [r for r in rendered.resources if r["parent"] in ("models", "ds")]
    # The store's 4, the server's 4, and the metrics proxy's script, the monitor, the alert
    # rules and the dashboard.
    assert len(children) == 12
    for child in children:
        assert "ns" in child["options"]["dependsOn"], child["name"]
        assert child["inputs"]["metadata"]["namespace"] == "llm-team", child["name"]


def test_integers_given_as_floats_reach_the_deployment_as_integers(stack: KubernetesStack) -> None:
    def build() -> None:
        _, args = store_and_server_args(stack)
        flags: dict[str, Any] = {**args["flags"], "port": 8080.0, "gpu_layers": 40.0}
        LlamaCppVulkanServer("ds", {**args, "flags": flags, "service_port": 8080.0})  # type: ignore[typeddict-item]

    resources = by_name(run_program(build, {}, [], stack="test"))
    argv = resources["ds-deployment"]["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert argv[argv.index("--port") + 1] == "8080" and argv[argv.index("-ngl") + 1] == "40"


def test_program_exports_url_alias_and_litellm_route() -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    outputs = run_program(program.main, config, secret_keys, stack="strix-halo").outputs
    assert outputs["url"] == "http://deepseek-v4-flash-0731.llm.svc:8080"
    assert outputs["alias"] == "deepseek-v4-flash-0731"
    assert outputs["litellmModel"] == {
        "model_name": "deepseek-v4-flash-0731",
        "litellm_params": {
            "model": "openai/deepseek-v4-flash-0731",
            "api_base": "http://deepseek-v4-flash-0731.llm.svc:8080/v1",
        },
    }


def test_program_with_secret_token_in_stack_config_masks_it() -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    config["llm-infra:hfToken"] = TOKEN
    rendered = run_program(program.main, config, [*secret_keys, "llm-infra:hfToken"], "strix-halo")
    assert any(r["type"] == "kubernetes:core/v1:Secret" for r in rendered.resources)
    assert TOKEN not in json.dumps(rendered.resources) + json.dumps(rendered.outputs)


def test_program_registers_nothing_when_config_is_invalid() -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    server = json.loads(config["llm-infra:server"])
    server["gpuLayers"] = 45
    config["llm-infra:server"] = json.dumps(server)
    monitor = RecordingMonitor(EchoMocks())
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config, secret_keys, stack="strix-halo", monitor=monitor)
    assert caught.value.problems == [
        "server.gpuLayers: 45 is more than the model's 43 layers "
        "(allowed 0-44; 44 also offloads the output layer)"
    ]
    assert monitor.registrations == []


def test_pulumi_up_refuses_a_docker_host_stack_without_its_secrets(tmp_path: Path) -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.mi300x.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    lock = {
        "version": 1, "repo": "deepseek-ai/DeepSeek-V4-Flash-0731", "revision": "a" * 40,
        "requested_revision": "main", "patterns": ["*.safetensors", "*.json"],
        "files": [
            {"path": "config.json", "name": "config.json", "size": 10, "sha256": "b" * 64},
            {"path": "m.safetensors", "name": "m.safetensors", "size": 20, "sha256": "c" * 64},
        ],
    }  # fmt: skip
    (tmp_path / "mi300x.lock.json").write_text(json.dumps(lock))
    config["llm-infra:lockFile"] = str(tmp_path / "mi300x.lock.json")
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config, secret_keys, stack="mi300x", preview=False)
    assert [p.split(":")[0] for p in caught.value.problems] == ["sshPrivateKey", "apiKey"]
    config["llm-infra:sshPrivateKey"] = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n"
    config["llm-infra:apiKey"] = "sk-live-0123456789"
    keys = [*secret_keys, "llm-infra:sshPrivateKey", "llm-infra:apiKey"]
    rendered = run_program(program.main, config, keys, stack="mi300x", preview=False)
    assert rendered.outputs["modelRevision"] == "a" * 40
    text = json.dumps(rendered.resources) + "".join(rendered.commands.values())
    assert "AAAA" not in text and "sk-live-0123456789" not in text


def test_an_api_key_stack_renders_without_the_cli_and_pulumi_up_refuses_it() -> None:
    """`server.apiKey: true` with no secret set (no Pulumi CLI needed to render): render and
    preview show the Secret with the placeholder, a warning names the key, `up` refuses, as
    for the Docker host's secrets."""
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    server = json.loads(config["llm-infra:server"])
    config["llm-infra:server"] = json.dumps({**server, "apiKey": True})
    rendered = run_program(program.main, config, secret_keys, stack="strix-halo")
    (secret,) = [r for r in rendered.resources if r["type"] == "kubernetes:core/v1:Secret"]
    assert secret["inputs"]["stringData"] == {"api-key": "[secret]"}
    assert any("apiKey: required (server.apiKey is true)" in w for w in rendered.warnings)
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config, secret_keys, stack="strix-halo", preview=False)
    assert [p.split(":")[0] for p in caught.value.problems] == ["apiKey"]


def test_litellm_route_can_be_a_configmap_in_litellms_namespace() -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    config["llm-infra:litellm"] = json.dumps({"manage": "configmap"})
    rendered = run_program(program.main, config, secret_keys, stack="strix-halo")
    route = next(r for r in rendered.resources if r["name"] == "litellm-route")
    assert route["inputs"]["metadata"]["namespace"] == "litellm"
    (entry,) = yaml.safe_load(route["inputs"]["data"]["model_list.yaml"])
    assert entry == rendered.outputs["litellmModel"]
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    default = run_program(program.main, stack_file.config, stack_file.secret_keys, "s")
    assert all(r["name"] != "litellm-route" for r in default.resources)


def test_pulumi_entry_point_runs_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main: infra/` as Pulumi's Python host runs it: the directory's __main__.py, by path."""
    import runpy

    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    monkeypatch.chdir(STACKS.parent / "infra")

    def pulumi_host() -> None:
        runpy.run_path(str(STACKS.parent / "infra"), run_name="__main__")

    rendered = run_program(pulumi_host, config, secret_keys, stack="strix-halo")
    assert any(r["type"] == "kubernetes:apps/v1:Deployment" for r in rendered.resources)


def test_verify_after_up_runs_a_job_after_the_deployment(tmp_path: Path) -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo.yaml")
    config, secret_keys = stack_file.config, stack_file.secret_keys
    server = json.loads(config["llm-infra:server"])
    server.update(verifyAfterUp=True, apiKey=True, minDecodeTps=20)
    config["llm-infra:server"] = json.dumps(server)
    # The check runs after an awaited rollout: upgrade keep (replace does not await the pod).
    store = json.loads(config["llm-infra:store"])
    config["llm-infra:store"] = json.dumps({**store, "upgrade": "keep"})
    config["llm-infra:lockFile"] = str(tmp_path / "strix-halo.lock.json")
    config["llm-infra:apiKey"] = "sk-live-verify-0123"
    keys = [*secret_keys, "llm-infra:apiKey"]
    with pytest.raises(ConfigError) as missing:
        run_program(program.main, config, keys, stack="strix-halo")
    assert missing.value.problems[0].startswith("server.verifyAfterUp: true, but there are no")
    expect = {"version": 1, "cases": []}
    (tmp_path / "strix-halo.verify.json").write_text(json.dumps(expect))
    rendered = run_program(program.main, config, keys, stack="strix-halo")
    resources = by_name(rendered)
    job = resources["deepseek-v4-flash-0731-verify-job"]
    assert {"deepseek-v4-flash-0731-deployment", "deepseek-v4-flash-0731-service"} <= set(
        job["options"]["dependsOn"]
    )
    (container,) = job["inputs"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][2] == "http://deepseek-v4-flash-0731.llm.svc:8080"
    assert container["command"][-2:] == ["--min-decode-tps", "20.0"]
    key = next(e for e in container["env"] if e["name"] == "LLM_INFRA_API_KEY")
    assert key["valueFrom"]["secretKeyRef"]["name"] == "deepseek-v4-flash-0731-api-key"
    data = resources["deepseek-v4-flash-0731-verify"]["inputs"]["data"]
    assert json.loads(data["expect.json"]) == expect and "def main(" in data["verify.py"]
    # What /props must report, from the args the Deployment's argv is made of.
    assert container["command"][5:7] == ["--props", "/opt/llm-infra-verify/props.json"]
    assert "def props_problems(" in data["props.py"]
    expected = {
        (tuple(c["path"]), c["match"], json.dumps(c["expected"]), c["rendered"])
        for c in json.loads(data["props.json"])["checks"]
    }
    assert expected == {
        (("build_info",), "build", '"b11434"', "image"),
        (
            ("model_path",),
            "equal",
            '"/models/DeepSeek-V4-Flash-0731-UD-IQ1_M-00001-of-00003.gguf"',
            "flags.model_path",
        ),
        (("total_slots",), "equal", "1", "flags.parallel"),
        (
            ("default_generation_settings", "n_ctx"),
            "equal",
            "65536",
            "flags.ctx_size / flags.parallel",
        ),
        (("chat_template",), "non-empty", '"a chat template"', "flags.model_path"),
    }
    peers = resources["deepseek-v4-flash-0731-ingress"]["inputs"]["spec"]["ingress"][0]["from"]
    verify_pod = {
        "app.kubernetes.io/instance": "deepseek-v4-flash-0731",
        "app.kubernetes.io/component": "verify",
    }
    assert {"podSelector": {"matchLabels": verify_pod}} in peers
    assert "sk-live-verify-0123" not in json.dumps(rendered.resources)


def test_each_server_of_a_fleet_verifies_against_its_own_expectations(tmp_path: Path) -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.strix-halo-pair.yaml")
    config, secret_keys = dict(stack_file.config), stack_file.secret_keys
    servers = json.loads(config["llm-infra:servers"])
    for server in servers:
        server.update(verifyAfterUp=True, minDecodeTps=20)
        server["store"]["upgrade"] = "keep"
    servers[1]["minDecodeTps"] = 25
    config["llm-infra:servers"] = json.dumps(servers)
    config["llm-infra:lockFile"] = str(tmp_path / "strix-halo-pair.lock.json")
    with pytest.raises(ConfigError) as missing:
        run_program(program.main, config, secret_keys, stack="strix-halo-pair")
    assert [p.split(":")[0] for p in missing.value.problems] == [
        "servers[0].verifyAfterUp",
        "servers[1].verifyAfterUp",
    ]
    assert "strix-halo-pair.deepseek-v4-flash-0731-b.verify.json" in missing.value.problems[1]
    assert "--server deepseek-v4-flash-0731-b --url URL --record" in missing.value.problems[1]
    expected = {}
    for server in servers:
        expected[server["name"]] = {"version": 1, "cases": [], "model": server["name"]}
        path = tmp_path / f"strix-halo-pair.{server['name']}.verify.json"
        path.write_text(json.dumps(expected[server["name"]]))
    resources = by_name(run_program(program.main, config, secret_keys, stack="strix-halo-pair"))
    for server, floor in zip(servers, ("20.0", "25.0"), strict=True):
        name = server["name"]
        job = resources[f"{name}-verify-job"]
        assert f"{name}-deployment" in job["options"]["dependsOn"]
        (container,) = job["inputs"]["spec"]["template"]["spec"]["containers"]
        assert container["command"][2] == f"http://{name}.llm.svc:8080"
        assert container["command"][-2:] == ["--min-decode-tps", floor]
        data = resources[f"{name}-verify"]["inputs"]["data"]
        assert json.loads(data["expect.json"]) == expected[name]
