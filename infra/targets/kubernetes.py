"""Target `kubernetes`: one llama.cpp server and its GGUF model store on a k3s node (a fleet's
servers each as one; `infra.targets.cluster` puts them on the cluster)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from components import (
    GgufModelStore,
    GgufModelStoreArgs,
    LlamaCppVulkanServer,
    LlamaCppVulkanServerArgs,
    LlamaServerFlags,
    ModelFile,
    ModelVolume,
)
from components.k8s.network_policies import NetworkClient
from components.llamacpp.expected_props import expected_props
from components.llamacpp.inputs import (
    LlamaCppRpcWorkerArgs,
    LlamaCppRuntime,
    LlamaCppSpeculative,
    runtime_record,
)
from components.llamacpp.manifests import head_pod_labels, service_url
from components.llamacpp.rpc_manifests import rpc_endpoint
from components.llamacpp.rpc_worker import LlamaCppRpcWorker
from components.llamacpp.split import check_split
from components.model_store.component import store_model_volume
from components.model_store.inputs import MODELS_MOUNT, DraftModel, NodePreflight
from components.model_store.manifests import DRAFT_PATH, fetch_job_pattern
from components.monitoring.inputs import KubernetesMonitoring
from components.validation import ComponentInputError, input_problems, with_defaults
from infra.config import ConfigError, KubernetesStack, StackSecrets
from infra.config.feeds import Fed, fed
from infra.config.inputs import stack_key
from infra.config.server import ServerSettings
from infra.lock import ModelSource
from infra.plan.stack import llamacpp_plan
from infra.targets.litellm import litellm_entry


def deploy_server(
    stack: KubernetesStack,
    source: ModelSource,
    secrets: StackSecrets,
    provider: k8s.Provider,
    depends: list[pulumi.Resource],
    verify_expectations: str | None,
    tensor_split: Sequence[float] | None = None,
) -> tuple[GgufModelStore, LlamaCppVulkanServer]:
    """One server: its model store, its RPC workers (a split model, whose `--tensor-split` is
    the plan's), then llama-server.

    With `store.upgrade: replace` the order of a model change is the server first (its old
    Deployment deleted, so no pod maps the old files), then the fetch Job that may delete them.
    """
    replace = stack.store.upgrade == "replace"
    given = fed(stack)
    model_store_args = store_args(stack, given, source, secrets.hf_token)
    # The store's volume by name, known (and its inputs checked) before the store exists: with
    # replace the server comes first.
    volume = store_model_volume(stack.store.name, model_store_args)
    head_args: LlamaCppVulkanServerArgs = {
        **server_args(stack, given, source, volume, tensor_split),
        "api_key": secrets.api_key,
        "verify_expectations": verify_expectations,
        "stop_before_model_change": replace,
    }
    worker_args = rpc_worker_args(stack, given)
    if worker_args:
        # A split model: the head's own inputs and the rules between it and its workers,
        # before either exists (the head is built last: its --rpc names the workers).
        head_problems = input_problems(head_args, LlamaCppVulkanServerArgs)
        if head_problems:
            raise ComponentInputError(
                "LlamaCppVulkanServer", stack.server.resource_name, head_problems
            )
        check_split(stack.server.resource_name, head_args, worker_args)
    workers = [
        LlamaCppRpcWorker(
            name,
            args,
            opts=pulumi.ResourceOptions(provider=provider, depends_on=depends),
        )
        for name, args in worker_args.items()
    ]
    store: GgufModelStore | None = None
    if not replace:
        store = GgufModelStore(
            stack.store.name,
            model_store_args,
            opts=pulumi.ResourceOptions(provider=provider, depends_on=depends),
        )
    else:
        pulumi.log.warn(
            f"{stack.server.resource_name}: store.upgrade: replace: a new model stops the server "
            "first (its Deployment is deleted) and then the fetch Job may delete the old model: "
            "the server is down until the new model is fetched and loaded, and `pulumi up` "
            "waits for the fetch, not for the new pod"
        )
    server = LlamaCppVulkanServer(
        stack.server.resource_name,
        head_args,
        # Waiting on the store waits on its fetch Job: the server starts on a complete model;
        # a split model's head also waits for its workers (it connects to them at load).
        # With replace the fetch waits for the server instead (its pod waits for the model).
        opts=pulumi.ResourceOptions(
            provider=provider, depends_on=[*depends, *([store] if store else []), *workers]
        ),
    )
    if store is None:
        store = GgufModelStore(
            stack.store.name,
            model_store_args,
            opts=pulumi.ResourceOptions(provider=provider, depends_on=depends),
            fetch_after=[server],
        )
    return store, server


def server_props(stack: KubernetesStack, source: ModelSource) -> dict[str, Any]:
    """What the server's `/props` must report: the verify Job's props.json, built from the
    same inputs, its inputs named by the stack file's keys (`server.parallel`)."""
    if not source.files:
        raise ConfigError(
            [f"model.files: patterns {list(stack.model.files)} name no file until the model is "
             "locked (run: llm-infra lock STACK)"]
        )  # fmt: skip
    given = fed(stack)
    volume = store_model_volume(stack.store.name, store_args(stack, given, source, None))
    split = None
    if stack.server.rpc is not None:
        split = llamacpp_plan(stack, source).tensor_split
    args = server_args(stack, given, source, volume, split)
    problems = input_problems(args, LlamaCppVulkanServerArgs)
    if problems:
        raise ComponentInputError("LlamaCppVulkanServer", stack.server.resource_name, problems)

    def key(path: str) -> str:
        return stack_key("LlamaCppVulkanServer", tuple(path.split(".")))

    return expected_props(args, key)


def rpc_worker_args(stack: KubernetesStack, given: Fed) -> dict[str, LlamaCppRpcWorkerArgs]:
    """LlamaCppRpcWorker inputs of a split model, by worker name, in `--rpc` order (`given`:
    what the stack gives, `fed`)."""
    server = stack.server
    if server.rpc is None:
        return {}
    head_labels = head_pod_labels(server.resource_name)
    workers: dict[str, LlamaCppRpcWorkerArgs] = {}
    for worker, name in zip(given["LlamaCppRpcWorker", ""], server.rpc_worker_names, strict=True):
        args = cast(
            LlamaCppRpcWorkerArgs,
            {
                **worker,
                "image": server.rpc_image,
                "head": server.resource_name,
                "head_pod_labels": head_labels,
                "supplemental_groups": supplemental_groups(server),
            },
        )
        runtime = runtime_input(server)
        if runtime is not None:
            args["runtime"] = runtime
        workers[name] = with_defaults(args, LlamaCppRpcWorkerArgs)
    return workers


def runtime_input(server: ServerSettings) -> LlamaCppRuntime | None:
    """The components' `runtime` input where the stack names server.runtime (None: the image
    decides, as it does for a Python program that passes none)."""
    return runtime_record(server.declared_runtime) if server.named_runtime else None


def rpc_endpoints(stack: KubernetesStack) -> list[str]:
    """The head's `--rpc` list: each worker's Service, in the workers' order."""
    rpc = stack.server.rpc
    if rpc is None:
        return []
    return [
        rpc_endpoint(name, stack.kubernetes.namespace, rpc.port)
        for name in stack.server.rpc_worker_names
    ]


def service_port(stack: KubernetesStack) -> int:
    """The port of the server's Service."""
    return stack.server.service_port or stack.server.port


def endpoint_url(stack: KubernetesStack) -> str:
    """The in-cluster base URL of the server's Service."""
    return service_url(stack.server.resource_name, stack.kubernetes.namespace, service_port(stack))


def litellm_route(stack: KubernetesStack, url: str) -> dict[str, Any]:
    """The LiteLLM entry of this server (with the key from LiteLLM's env when one is required)."""
    return litellm_entry(stack.server.alias, url, api_key=stack.server.api_key)


def allowed_clients(stack: KubernetesStack, given: Fed) -> list[NetworkClient] | None:
    """Who the server's NetworkPolicy admits (None: no policy)."""
    if not stack.network.policies:
        return None
    clients: list[NetworkClient] = given["LlamaCppVulkanServer", "allowed_clients"]
    return clients + [{"cidr": cidr} for cidr in stack.network.allow_cidrs]


def supplemental_groups(server: ServerSettings) -> list[int]:
    """The pods' supplemental groups: the node's render group, where the stack names it."""
    return [server.render_group_id] if server.render_group_id else []


def store_args(
    stack: KubernetesStack,
    given: Fed,
    source: ModelSource,
    hf_token: pulumi.Input[str] | None,
) -> GgufModelStoreArgs:
    """GgufModelStore inputs from the stack config (`given`: what it gives, `fed`) and the
    model lock."""
    store = stack.store
    files: list[ModelFile] = list(source.files)
    args = cast(
        GgufModelStoreArgs,
        {
            **given["GgufModelStore", ""],
            "revision": source.revision,
            "files": files,
            "fetch_timeout_seconds": int(store.fetch_timeout_hours * 3600),
            "hf_token": hf_token,
            # The server's image and GPU access: the preflight sees the node as the server will.
            "node_preflight": node_preflight(stack, given) if store.node_preflight else None,
        },
    )
    spec = stack.server.speculative
    if spec is not None and spec.draft is not None and source.draft is not None:
        draft = {**given["GgufModelStore", "draft"], "revision": source.draft.revision}
        args["draft"] = cast(DraftModel, {**draft, "files": list(source.draft.files)})
    return with_defaults(args, GgufModelStoreArgs)


def node_preflight(stack: KubernetesStack, given: Fed) -> NodePreflight:
    """The node preflight's inputs: the server's image and GPU access, so the preflight sees
    the node as the server will."""
    return cast(
        NodePreflight,
        {
            **given["GgufModelStore", "node_preflight"],
            "image": stack.server.effective_runtime.pinned_image,
            "cpu_variant": stack.memory.cpu_variant,
        },
    )


def server_args(
    stack: KubernetesStack,
    given: Fed,
    source: ModelSource,
    model: ModelVolume,
    tensor_split: Sequence[float] | None = None,
) -> LlamaCppVulkanServerArgs:
    """LlamaCppVulkanServer inputs from the stack config (`given`: what it gives, `fed`) and the
    model lock (`tensor_split`: a split model's, from its plan: `Plan.tensor_split`)."""
    server = stack.server
    flags = cast(
        LlamaServerFlags,
        {
            **given["LlamaCppVulkanServer", "flags"],
            "model_path": f"{MODELS_MOUNT}/{source.files[0]['name']}",
        },
    )
    if server.speculative is not None:
        spec = server.speculative.model_dump(exclude_none=True, exclude={"draft"})
        draft = source.draft
        if draft is not None and draft.files:
            spec["draft_model_path"] = f"{DRAFT_PATH}/{draft.files[0]['name']}"
        flags["speculative"] = cast(LlamaCppSpeculative, spec)
    if server.rpc is not None:
        # A split model: the workers' Services, and each device's share from the memory plan.
        if tensor_split is None:
            raise ValueError("server.rpc: a split model's server needs its plan's tensor split")
        flags["rpc"] = rpc_endpoints(stack)
        flags["tensor_split"] = list(tensor_split)
    args = cast(
        LlamaCppVulkanServerArgs,
        {
            # memory's speeds too: the server checks its startup probe against its store's model
            # at them.
            **given["LlamaCppVulkanServer", ""],
            "image": server.server_image,
            "flags": flags,
            "model": model,
            "service_port": service_port(stack),
            "supplemental_groups": supplemental_groups(server),
            "allowed_clients": allowed_clients(stack, given),
            "metrics": monitoring(stack, given),
        },
    )
    runtime = runtime_input(server)
    if runtime is not None:
        args["runtime"] = runtime
    return with_defaults(args, LlamaCppVulkanServerArgs)


def monitoring(stack: KubernetesStack, given: Fed) -> KubernetesMonitoring | None:
    """The server's metrics and monitoring objects from the stack's `metrics` (None: off)."""
    metrics = stack.metrics
    if not metrics.enabled:
        return None
    scrapers = given["LlamaCppVulkanServer", "metrics.scrapers"]
    return cast(
        KubernetesMonitoring,
        {
            **given["LlamaCppVulkanServer", "metrics"],
            "scrapers": scrapers if stack.network.policies else [],
            "monitor_kind": metrics.monitor_kind if metrics.service_monitor else None,
            "reference": metrics.reference.speeds(),
            "fetch_job_pattern": fetch_job_pattern(stack.store.name),
        },
    )
