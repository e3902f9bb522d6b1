"""A kubernetes stack on its cluster: the provider, the namespace, each server (one, or a
fleet's) with its outputs, and the LiteLLM route ConfigMap."""

from __future__ import annotations

from functools import partial
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.validation import ComponentInputError
from infra.config import ConfigError, FleetStack, KubernetesStack, StackSecrets
from infra.config.inputs import stack_problems
from infra.lock import ModelSource
from infra.plan.report import Plan
from infra.targets.kubernetes import deploy_server, litellm_route


def deploy(
    stack: KubernetesStack | FleetStack,
    sources: list[ModelSource],
    secrets: StackSecrets,
    plan: Plan,
    verify_expectations: list[str | None] | None = None,
    *,
    fleet: bool = False,
) -> None:
    """Create the stack's resources (each server's, in `servers:` order) and its outputs.

    `plan`: the stack's plan (each server's own in `plan.server_plans()`), which a split
    model's `--tensor-split` comes from. `verify_expectations`: per server, what its post-up
    verify Job checks (None: no Job).

    A single-server stack keeps the names and outputs it always had; a fleet (`fleet`: the
    fleet target's outputs) adds `servers` (per server: url, alias, modelPath, lockDigest,
    modelRevision) and `litellmModelList`.
    """
    servers = stack.server_stacks()
    for index, (server_stack, source) in enumerate(zip(servers, sources, strict=True)):
        if not source.files:
            problem = (
                f"model.files: patterns {list(server_stack.model.files)} name no file until the "
                "model is locked (run: llm-infra lock STACK)"
            )
            raise ConfigError([stack.server_key(problem, index)])
    settings = stack.kubernetes
    provider = k8s.Provider("kubernetes", context=settings.context)
    opts = pulumi.ResourceOptions(provider=provider)
    depends: list[pulumi.Resource] = []
    if settings.create_namespace:
        namespace = k8s.core.v1.Namespace(
            "namespace",
            metadata={
                "name": settings.namespace,
                "labels": {"app.kubernetes.io/managed-by": "llm-infra"},
            },
            opts=opts,
        )
        depends.append(namespace)
    entries: list[pulumi.Output[dict[str, Any]]] = []
    outputs: dict[str, pulumi.Output[dict[str, Any]]] = {}
    expectations = verify_expectations or [None] * len(servers)
    for index, (server_stack, source, expect, server_plan) in enumerate(
        zip(servers, sources, expectations, plan.server_plans(), strict=True)
    ):
        try:
            store, server = deploy_server(
                server_stack, source, secrets, provider, depends, expect, server_plan.tensor_split
            )
        except ComponentInputError as exc:
            # A component's refusal, named by the stack file's key (a fleet's: `servers[1].image`).
            raise ConfigError([stack.server_key(p, index) for p in stack_problems(exc)]) from None
        entry = server.url.apply(partial(litellm_route, server_stack))
        entries.append(entry)
        if fleet:
            outputs[server_stack.server.resource_name] = pulumi.Output.all(
                url=server.url,
                alias=server.alias,
                modelPath=store.model_path,
                lockDigest=store.lock_digest,
                modelRevision=source.revision if source.locked else "unlocked",
            )
        else:
            pulumi.export("url", server.url)
            pulumi.export("alias", server.alias)
            pulumi.export("modelPath", store.model_path)
            pulumi.export("lockDigest", store.lock_digest)
            pulumi.export("modelRevision", source.revision if source.locked else "unlocked")
            pulumi.export("litellmModel", entry)
    model_list = pulumi.Output.all(*entries).apply(list)
    if fleet:
        pulumi.export("servers", outputs)
        pulumi.export("litellmModelList", model_list)
    if stack.litellm.manage == "configmap":
        k8s.core.v1.ConfigMap(
            "litellm-route",
            metadata={
                "name": f"llm-infra-route-{servers[0].server.resource_name}",
                "namespace": stack.litellm.namespace,
                "labels": {"app.kubernetes.io/managed-by": "llm-infra", "litellm/route": "true"},
            },
            # A model_list LiteLLM's config can include (or an operator can merge): an entry per
            # server, replicas of one alias side by side (LiteLLM balances them).
            data=model_list.apply(
                lambda m: {"model_list.yaml": yaml.safe_dump(m, sort_keys=False)}
            ),
            opts=pulumi.ResourceOptions(provider=provider),
        )
