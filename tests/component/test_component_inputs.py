# The cases feed the constructors deliberately ill-typed inputs, as a Python caller might.
# mypy: disable-error-code="arg-type, typeddict-item, misc, literal-required, return-value"
# mypy: disable-error-code="typeddict-unknown-key, assignment, dict-item, unused-ignore"
"""The components check their own inputs, whichever door they come through.

A Python program (`from components import ...`) under a fresh mock engine, and `provider/`
over gRPC as the engine drives it, get the same refusals a stack file gets, naming the input as
that caller wrote it, before any resource is registered.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import pulumi
import pytest
from pulumi.runtime import settings

from components import GgufModelStore, LlamaCppRpcWorker, LlamaCppVulkanServer, VllmRocmServer
from components.grammars import ssh_host_key
from components.llamacpp.split import check_split, split_problems
from components.validation import ComponentInputError, checked_inputs
from components.vllm.inputs import CADDY_IMAGE, VllmRocmServerArgs
from infra.config.docker_host import CaddySettings
from infra.config.feeds import fed
from infra.config.inputs import stack_key
from infra.render import run_program
from infra.targets.kubernetes import rpc_worker_args, server_args, store_args
from infra.targets.registry import stack_plan
from tests.conftest import stack_values, strix, unlocked_source
from tests.support.provider_deploy import (
    LLAMA,
    VLLM,
    Deployment,
    input_errors,
    vllm_inputs,
)
from tests.support.provider_host import secret
from tests.support.vllm_samples import HOST_KEY, SSH_KEY
from tests.support.vllm_samples import server_args as sample_vllm_args

INJECTED_BLOCK = "127.0.0.2/32\n\thandle /tokenize {\n\t\treverse_proxy vllm:8000\n\t}\n\t#"


def refusal(build: Callable[[], None]) -> str:
    """Run `build` under mocks; it must be refused. The problems, one per line."""
    with pytest.raises(ComponentInputError) as caught:
        run_program(build, {}, [], stack="test")
    return str(caught.value)


def vllm_args() -> Any:
    """The VllmRocmServer sample args, as a caller's plain dict."""
    return copy.deepcopy(dict(sample_vllm_args()))


def vllm(**overrides: Any) -> Callable[[], None]:
    args = vllm_args()
    for key, value in overrides.items():
        section, _, field = key.partition("__")
        if field:
            args[section] = {**args[section], field: value}  # type: ignore[literal-required]
        else:
            args[key] = value  # type: ignore[literal-required]
    return lambda: VllmRocmServer("mi300x", args) and None


def llama(change: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    stack = strix(stack_values("strix-halo"))
    source = unlocked_source(stack)
    volume = {
        "claim_name": "models",
        "fetcher_config_map": "models-fetcher",
        "check_image": "python:3.12.8-slim-bookworm",
        "run_as_user": 10001,
    }
    args = copy.deepcopy(dict(server_args(stack, fed(stack), source, volume)))  # type: ignore[arg-type]
    change(args)
    return lambda: LlamaCppVulkanServer("ds", args) and None  # type: ignore[arg-type]


def store(change: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    stack = strix(stack_values("strix-halo"))
    args = copy.deepcopy(dict(store_args(stack, fed(stack), unlocked_source(stack), None)))
    change(args)
    return lambda: GgufModelStore("models", args) and None  # type: ignore[arg-type]


def test_caddyfile_block_in_an_allowed_cidr_is_refused_naming_the_cidr() -> None:
    problems = refusal(vllm(caddy__allowed_cidrs=[INJECTED_BLOCK]))
    assert "caddy.allowed_cidrs[0]: '127.0.0.2/32\\n\\thandle" in problems
    assert "is not a network address/prefix" in problems


def test_site_and_acme_email_with_newlines_are_refused() -> None:
    problems = refusal(vllm(caddy__site="llm.example.com\nhandle", caddy__acme_email="a@b.c\n}"))
    assert "caddy.site: 'llm.example.com\\nhandle' is not a lowercase DNS name" in problems
    assert "caddy.acme_email: 'a@b.c\\n}': String should match pattern" in problems


def test_model_dir_with_a_command_is_refused() -> None:
    problems = refusal(vllm(model_dir="/srv/models\ntouch X\n#"))
    assert "model_dir: '/srv/models\\ntouch X\\n#' must be an absolute path" in problems


def test_missing_host_key_is_refused_unless_explicitly_ignored() -> None:
    args = vllm_args()
    del args["connection"]["host_key"]  # type: ignore[misc]
    problems = refusal(lambda: VllmRocmServer("mi300x", args) and None)
    assert "connection.host_key: is required, so that nobody in between" in problems
    args["connection"] = {**args["connection"], "insecure_ignore_host_key": True}  # type: ignore[typeddict-unknown-key]
    rendered = run_program(lambda: VllmRocmServer("mi300x", args) and None, {}, [], "test")
    assert any(r["type"] == "command:remote:Command" for r in rendered.resources)


def test_host_key_with_an_opt_out_is_a_contradiction() -> None:
    args = vllm_args()
    args["connection"] = {**args["connection"], "insecure_ignore_host_key": True}  # type: ignore[typeddict-unknown-key]
    problems = refusal(lambda: VllmRocmServer("mi300x", args) and None)
    # The other input is named as the caller writes it.
    assert "connection.insecure_ignore_host_key: contradicts connection.host_key" in problems


@pytest.mark.parametrize("cidrs", [["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1", "::/0"]])
def test_an_allowlist_of_the_whole_world_needs_allow_world(cidrs: list[str]) -> None:
    problems = refusal(vllm(caddy__allowed_cidrs=cidrs))
    assert f"caddy.allowed_cidrs: {cidrs!r} together admit every address" in problems
    assert "or set caddy.allow_world to serve the world on purpose" in problems
    args = vllm_args()
    args["caddy"] = {**args["caddy"], "allowed_cidrs": cidrs, "allow_world": True}
    rendered = run_program(lambda: VllmRocmServer("mi300x", args) and None, {}, [], "test")
    assert rendered.resources


def test_an_empty_allowlist_is_refused() -> None:
    problems = refusal(vllm(caddy__allowed_cidrs=[]))
    assert "caddy.allowed_cidrs: is empty, so nobody could connect" in problems


def test_missing_caddy_tls_is_refused_not_a_key_error() -> None:
    args = vllm_args()
    args["caddy"] = {k: v for k, v in args["caddy"].items() if k != "tls"}  # type: ignore[assignment]
    assert "caddy.tls: is required" in refusal(lambda: VllmRocmServer("x", args) and None)


def test_missing_caddy_image_is_the_pinned_image_a_stack_file_gets() -> None:
    args = vllm_args()
    args["caddy"] = {k: v for k, v in args["caddy"].items() if k != "image"}  # type: ignore[assignment]
    checked = checked_inputs("VllmRocmServer", "x", args, VllmRocmServerArgs)
    assert checked["caddy"]["image"] == CADDY_IMAGE == CaddySettings.model_fields["image"].default


def test_truncated_host_key_is_refused_and_a_fingerprint_is_explained() -> None:
    assert "does not decode" in refusal(vllm(connection__host_key="ssh-ed25519 AAAA"))
    fingerprint = "SHA256:" + "A" * 43
    problems = refusal(vllm(connection__host_key=fingerprint))
    assert "is a key fingerprint, not the key" in problems


def test_host_key_as_ssh_keyscan_prints_it_is_accepted() -> None:
    assert ssh_host_key(f"mi300x.example.com {HOST_KEY} root@mi300x") == HOST_KEY
    rsa_blob_as_ed25519 = "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7"
    with pytest.raises(ValueError, match=r"not an ssh-ed25519 key|does not decode"):
        ssh_host_key(rsa_blob_as_ed25519)


def test_go_template_text_in_the_alias_is_refused() -> None:
    problems = refusal(llama(lambda a: a["flags"].update(alias="{{ $labels.job }}")))
    assert "flags.alias: '{{ $labels.job }}': String should match pattern" in problems


def test_out_of_range_and_wrongly_typed_numbers_are_refused() -> None:
    def change(args: dict[str, Any]) -> None:
        args["flags"].update(port=70000, gpu_layers=-1, threads=True, temperature="1.0")
        args["flags"]["top_p"] = False
        args["service_port"] = "8080"

    assert set(refusal(llama(change)).splitlines()[1:]) == {
        "flags.port: 70000: Input should be less than or equal to 65535",
        "flags.gpu_layers: -1: Input should be greater than or equal to 0",
        "flags.threads: True: Input should be a valid integer",
        "service_port: '8080': Input should be a valid integer",
        "flags.temperature: '1.0': Input should be a valid number",
        "flags.top_p: False: Input should be a valid number",
    }


def test_unknown_cache_type_and_gpu_access_typo_are_refused_with_what_is_allowed() -> None:
    def change(args: dict[str, Any]) -> None:
        args["flags"]["cache_type_k"] = "q9"
        args["gpu_access"] = "device_plugin"

    problems = refusal(llama(change))
    assert "flags.cache_type_k: 'q9': Input should be 'f32', 'f16'" in problems
    assert "gpu_access: 'device_plugin': Input should be 'privileged' or 'device-plugin'" in (
        problems
    )


def test_a_misspelt_and_an_unknown_flag_are_refused_not_ignored() -> None:
    def change(args: dict[str, Any]) -> None:
        args["flags"]["gpu_layer"] = args["flags"].pop("gpu_layers")
        args["flags"]["ngl"] = 3

    problems = refusal(llama(change))
    assert "flags.gpu_layers: is required" in problems
    assert "flags.gpu_layer: unknown key" in problems and "flags.ngl: unknown key" in problems


def test_retired_pattern_that_matches_the_model_is_refused() -> None:
    problems = refusal(store(lambda a: a.update(retired_patterns=["*"])))
    assert "retired_patterns[0]: '*' matches" in problems and "a file of this model" in problems


def test_a_lock_file_name_outside_the_volume_and_an_upgrade_typo_are_refused() -> None:
    def change(args: dict[str, Any]) -> None:
        args["files"][0] = {**args["files"][0], "name": "../x"}

    problems = refusal(store(change))
    assert "files[0].name: '../x' is not a file name" in problems
    problems = refusal(store(lambda a: a.update(upgrade="replace-all")))
    assert "upgrade: 'replace-all': Input should be 'keep' or 'replace'" in problems


def test_rpc_worker_without_head_labels_is_refused() -> None:
    args = {
        "namespace": "llm-infra",
        "image": "registry.lan/llama.cpp:vulkan-rpc-b11434",
        "head": "ds",
        "head_pod_labels": {},
        "node_selector": {"kubernetes.io/hostname": "nucbox-2"},
        "resources": {"limits": {"memory": "4Gi"}},
    }
    problems = refusal(lambda: LlamaCppRpcWorker("w", args) and None)  # type: ignore[arg-type]
    assert "head_pod_labels: List should have at least 1 item" in problems or (
        "head_pod_labels: Dictionary should have at least 1 item" in problems
    )


def test_refused_inputs_register_no_resource_at_all() -> None:
    registered: list[str] = []

    def program() -> None:
        try:
            VllmRocmServer("mi300x", {**vllm_args(), "model_dir": "relative"})
        except ComponentInputError:
            registered.append("refused")

    rendered = run_program(program, {}, [], stack="test")
    assert registered == ["refused"] and rendered.resources == []


def resolved(value: Any) -> Any:
    """An output's value, awaited on a loop of its own (no program: nothing to register)."""

    async def wait() -> Any:
        return await value().future()

    def run() -> Any:
        settings.configure(settings.Settings(project="test", stack="test", dry_run=False))
        loop = asyncio.new_event_loop()
        try:
            asyncio.set_event_loop(loop)
            return loop.run_until_complete(wait())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    # Pulumi's ambient settings are context variables: keep this loop's tasks out of them.
    return contextvars.copy_context().run(run)


@pytest.mark.parametrize(
    ("host", "connection"),
    [("bad host", False), ("bad host", True), ("gpu-host.example.com", False)],
    ids=["host-output", "connection-output", "good-host-output"],
)
def test_an_output_input_is_checked_with_the_same_message_when_it_resolves(
    host: str, connection: bool
) -> None:
    def checked_host() -> pulumi.Output[Any]:
        args = vllm_args()
        if connection:
            args["connection"] = pulumi.Output.from_input({**args["connection"], "host": host})
        else:
            args["connection"]["host"] = pulumi.Output.from_input(host)
        checked = checked_inputs("VllmRocmServer", "mi300x", args, VllmRocmServerArgs)
        return pulumi.Output.from_input(checked["connection"]).apply(lambda c: c["host"])

    if host == "bad host":
        with pytest.raises(ComponentInputError, match=r"connection\.host: 'bad host' is not a"):
            resolved(checked_host)
    else:
        assert resolved(checked_host) == host


def test_stack_file_keys_name_the_component_inputs_they_feed() -> None:
    assert stack_key("VllmRocmServer", ("caddy", "allowed_cidrs", 0)) == "caddy.allowedCidrs[0]"
    assert stack_key("LlamaCppVulkanServer", ("flags", "ctx_size")) == "server.contextSize"
    assert stack_key("GgufModelStore", ("files", 0, "name")) == "model.files[0].name"


def test_provider_refuses_a_caddyfile_block_naming_the_camel_case_input(
    preview: Deployment,
) -> None:
    inputs = vllm_inputs()
    inputs["caddy"]["allowedCidrs"] = [INJECTED_BLOCK]
    inputs["flags"]["port"] = 70000
    with pytest.raises(grpc.RpcError) as caught:
        preview.construct(VLLM, "mi300x", inputs)
    errors = dict(input_errors(caught.value))
    assert "is not a network address/prefix" in errors["caddy.allowedCidrs[0]"]
    assert "less than or equal to 65535" in errors["flags.port"]
    assert [r for r in preview.monitor.registrations if r.type == VLLM] == []


def test_an_api_key_the_env_file_cannot_hold_is_refused_without_showing_it() -> None:
    secret = "sk-live'\nleak"
    problems = refusal(vllm(api_key=secret))
    assert "api_key: must be non-empty, without single quotes or line breaks" in problems
    assert "sk-live" not in problems


def test_a_startup_probe_too_short_for_the_stores_model_is_refused() -> None:
    def change(args: dict[str, Any]) -> None:
        args["model"] = {**args["model"], "model_file": "Model-00001-of-00003.gguf"}
        args["flags"]["model_path"] = "/models/Model-00001-of-00003.gguf"
        args["model"]["model_bytes"] = 17 * 2**30
        args["probes"]["startup"].update(initial_delay_seconds=0, period_seconds=10)
        args["probes"]["startup"]["failure_threshold"] = 1

    problems = refusal(llama(change))
    assert "probes.startup.failure_threshold: 1 allows the load too little time" in problems
    assert "reading 17.0 GiB at 300 MiB/s plus 60s takes ~118s" in problems
    assert "raise it to at least 18" in problems


def test_the_server_must_load_the_stores_first_file() -> None:
    def change(args: dict[str, Any]) -> None:
        args["model"] = {**args["model"], "model_file": "Model-00001-of-00003.gguf"}
        args["flags"]["model_path"] = "/models/Model-00002-of-00003.gguf"

    problems = refusal(llama(change))
    assert "flags.model_path: '/models/Model-00002-of-00003.gguf' is not the store's first" in (
        problems
    )


def test_a_store_gives_its_server_the_first_file_and_the_model_size() -> None:
    stack = strix(stack_values("strix-halo"))
    args: Any = copy.deepcopy(dict(store_args(stack, fed(stack), unlocked_source(stack), None)))
    args["files"] = [{**f, "size": 2**30, "sha256": "a" * 64} for f in args["files"]]
    volumes: list[Any] = []
    run_program(lambda: volumes.append(GgufModelStore("m", args).model_volume), {}, [], "t")
    (volume,) = volumes
    assert volume["model_file"] == args["files"][0]["name"]
    assert volume["model_bytes"] == len(args["files"]) * 2**30


def test_over_the_provider_an_input_checked_when_it_resolves_is_named_in_camel_case(
    up: Deployment,
) -> None:
    inputs = vllm_inputs()
    # A secret object input reaches the provider as one output, checked when it resolves.
    connection = {**inputs["connection"], "privateKey": SSH_KEY, "hostKey": "ssh-ed25519 AAAA"}
    inputs["connection"] = secret(connection)
    with pytest.raises(grpc.RpcError) as caught:
        up.construct(VLLM, "mi300x", inputs)
    assert "connection.hostKey: 'ssh-ed25519 AAAA' has a key that does not decode" in (
        caught.value.details()
    )


def test_a_scrape_allowlist_of_the_whole_world_needs_allow_world() -> None:
    args = vllm_args()
    args["metrics"] = {"port": 9443, "allowed_cidrs": ["0.0.0.0/0", "::/0"]}
    problems = refusal(lambda: VllmRocmServer("mi300x", args) and None)
    assert "metrics.allowed_cidrs: ['0.0.0.0/0', '::/0'] together admit every address" in problems
    assert "or set metrics.allow_world" in problems
    args["metrics"]["allow_world"] = True
    rendered = run_program(lambda: VllmRocmServer("mi300x", args) and None, {}, [], "test")
    assert rendered.resources


SPLIT_VOLUME: Any = {
    "claim_name": "m",
    "fetcher_config_map": "f",
    "check_image": "python:3.12",
    "run_as_user": 1,
}


def split_stack() -> Any:
    return strix(stack_values("strix-halo-pair-split"))


def split_pair() -> tuple[str, Any, dict[str, Any]]:
    """The head's name and args and its workers' args, as the stack target builds them."""
    stack = split_stack()
    source = unlocked_source(stack)
    split = stack_plan(stack, source).tensor_split
    head = copy.deepcopy(server_args(stack, fed(stack), source, SPLIT_VOLUME, split))
    return stack.server.resource_name, head, copy.deepcopy(dict(rpc_worker_args(stack, fed(stack))))


def test_a_split_models_head_and_workers_as_the_stack_builds_them_agree() -> None:
    server, head, workers = split_pair()
    assert workers and split_problems(server, head, workers) == []


def test_workers_that_do_not_match_their_head_are_named() -> None:
    server, head, workers = split_pair()
    (name,) = workers
    workers[name]["head_pod_labels"] = {"app.kubernetes.io/instance": "someone-else"}
    head["flags"]["rpc"] = ["elsewhere.llm-infra.svc:50052"]
    head["flags"]["tensor_split"] = [1.0, 1.0, 1.0]
    problems = dict(
        (".".join(map(str, loc)), message) for loc, message in split_problems(server, head, workers)
    )
    assert "would shut the head out" in problems[f"{name}.head_pod_labels"]
    assert "is not the workers' Services in order" in problems["flags.rpc"]
    assert "has 3 shares for 1 workers" in problems["flags.tensor_split"]
    with pytest.raises(ComponentInputError, match=r"flags\.rpc"):
        check_split(server, head, workers)


def test_a_python_program_gets_the_split_checked_when_it_builds_the_head() -> None:
    name, head, workers = split_pair()
    head["flags"]["rpc"] = ["elsewhere.llm-infra.svc:50052"]

    def build() -> None:
        for worker, args in workers.items():
            LlamaCppRpcWorker(worker, args)
        LlamaCppVulkanServer(name, head)

    problems = refusal(build)
    assert f"invalid inputs of LlamaCppVulkanServer {name!r}" in problems
    assert "flags.rpc: ['elsewhere.llm-infra.svc:50052'] is not the workers' Services" in problems


def test_a_worker_built_after_its_head_is_checked_against_it() -> None:
    name, head, workers = split_pair()
    ((worker, args),) = workers.items()
    args["head_pod_labels"] = {"app.kubernetes.io/instance": "someone-else"}

    def build() -> None:
        LlamaCppVulkanServer(name, head)
        LlamaCppRpcWorker(worker, args)

    problems = refusal(build)
    assert f"invalid inputs of LlamaCppRpcWorker {worker!r}" in problems
    assert "head_pod_labels: {'app.kubernetes.io/instance': 'someone-else'} does not select" in (
        problems
    )
    _, _, fresh = split_pair()
    other = fresh[worker]
    other["port"] = 50099

    def unlisted() -> None:
        LlamaCppVulkanServer(name, head)
        LlamaCppRpcWorker(worker, other)

    assert "does not list this worker's Service" in refusal(unlisted)


def test_a_matching_pair_builds_in_either_order() -> None:
    name, head, workers = split_pair()

    def workers_first() -> None:
        for worker, args in workers.items():
            LlamaCppRpcWorker(worker, args)
        LlamaCppVulkanServer(name, head)

    def head_first() -> None:
        LlamaCppVulkanServer(name, head)
        for worker, args in workers.items():
            LlamaCppRpcWorker(worker, args)

    for build in (workers_first, head_first):
        rendered = run_program(build, {}, [], stack="test")
        types = {r["type"] for r in rendered.resources}
        assert {
            "llm-infra:index:LlamaCppRpcWorker",
            "llm-infra:index:LlamaCppVulkanServer",
        } <= types


def test_a_python_program_cannot_give_a_worker_the_official_image_without_rpc() -> None:
    _, _, workers = split_pair()
    ((worker, args),) = workers.items()
    args["image"] = "ghcr.io/ggml-org/llama.cpp@sha256:" + "ab" * 32
    problems = refusal(lambda: LlamaCppRpcWorker(worker, args) and None)
    assert "image: 'ghcr.io/ggml-org/llama.cpp@sha256:abab" in problems
    assert "is built without -DGGML_RPC" in problems


def test_a_python_program_cannot_put_a_worker_on_its_heads_node() -> None:
    name, head, workers = split_pair()
    ((worker, args),) = workers.items()
    args["node_selector"] = dict(head["node_selector"])

    def build() -> None:
        LlamaCppVulkanServer(name, head)
        LlamaCppRpcWorker(worker, args)

    problems = refusal(build)
    assert f"invalid inputs of LlamaCppRpcWorker {worker!r}" in problems
    assert f"is already the node of {name}" in problems


def test_extra_args_the_program_renders_are_refused_naming_the_python_inputs() -> None:
    def change(args: dict[str, Any]) -> None:
        args["extra_args"] = ["--ctx_size", "4096", "--api-key-file=/k", "--n-cpu-mo", "2"]

    problems = refusal(llama(change))
    assert "extra_args[0]: '--ctx_size' (--ctx-size) is rendered from flags.ctx_size" in problems
    owned = "extra_args[2]: '--api-key-file=/k' (--api-key-file) is rendered from api_key"
    assert owned in problems
    assert (
        "extra_args[3]: '--n-cpu-mo' is not an option of llama-server b11434 (did you " in problems
    )
    vllm_problems = refusal(vllm(extra_args=["--max-model", "4096"]))
    assert (
        "extra_args[0]: '--max-model' abbreviates --max-model-len, which flags.max_model_len sets"
        in vllm_problems
    )


def test_provider_refuses_extra_args_naming_the_camel_case_inputs(
    preview: Deployment,
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        preview.server(preview.store(), extraArgs=["-ngl", "99", "--top-k", "40", "--tags", "x"])
    errors = dict(input_errors(caught.value))
    assert errors == {
        "extraArgs[0]": "'-ngl' (--gpu-layers) is rendered from flags.gpuLayers: set that instead",
        "extraArgs[2]": "'--top-k' is rendered from flags.topK: set that instead",
    }
    assert [r for r in preview.monitor.registrations if r.type == LLAMA] == []
    inputs = vllm_inputs()
    inputs["extraArgs"] = ["--served-model-name", "x"]
    with pytest.raises(grpc.RpcError) as caught:
        preview.construct(VLLM, "mi300x", inputs)
    assert dict(input_errors(caught.value)) == {
        "extraArgs[0]": "'--served-model-name' is rendered from flags.servedModelName: set that "
        "instead"
    }


def test_provider_passes_valid_extra_args_after_the_rendered_flags(
    preview: Deployment,
) -> None:
    words = ["--n-cpu-moe", "3", "--tags", "$(HOME) `id`; x"]
    server = preview.server(preview.store(), extraArgs=words)
    deployment = preview.children(server.urn)["qwen-deployment"]
    (container,) = [
        c for c in deployment.inputs["spec"]["template"]["spec"]["containers"]
        if c["name"] == "llama-server"
    ]  # fmt: skip
    assert container["args"][-4:] == ["--n-cpu-moe", "3", "--tags", "$$(HOME) `id`; x"]
