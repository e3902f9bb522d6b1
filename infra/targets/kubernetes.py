"""Target `kubernetes`: a GGUF model store and a llama.cpp Vulkan server on a k3s node."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import (
    GgufModelStore,
    GgufModelStoreArgs,
    HttpProbe,
    LlamaCppVulkanServer,
    LlamaCppVulkanServerArgs,
    ModelFile,
    ModelVolume,
)
from components.llamacpp_manifests import service_url
from components.model_store_manifests import MODELS_MOUNT, fetch_job_pattern
from components.monitoring_manifests import KubernetesMonitoring
from components.network_policies import NetworkClient
from infra.config import ConfigError, ProbeSettings, StackSecrets, StrixHaloStack
from infra.lock import ModelSource
from infra.targets.litellm import litellm_entry


def deploy(
    stack: StrixHaloStack,
    source: ModelSource,
    secrets: StackSecrets,
    verify_expectations: str | None = None,
) -> None:
    """Create the stack's resources and export its outputs."""
    if not source.files:
        raise ConfigError(
            [
                f"model.files: patterns {list(stack.model.files)} name no file until the model is "
                "locked (run: llm-infra lock STACK)"
            ]
        )
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
    store = GgufModelStore(
        stack.store.name,
        store_args(stack, source, secrets.hf_token),
        opts=pulumi.ResourceOptions(provider=provider, depends_on=depends),
    )
    server = LlamaCppVulkanServer(
        stack.server.resource_name,
        {
            **server_args(stack, source, store.model_volume),
            "api_key": secrets.api_key,
            "verify_expectations": verify_expectations,
            "min_decode_tps": stack.server.min_decode_tps,
        },
        # Waiting on the store waits on its fetch Job: the server starts on a complete model.
        opts=pulumi.ResourceOptions(provider=provider, depends_on=[*depends, store]),
    )
    pulumi.export("url", server.url)
    pulumi.export("alias", server.alias)
    pulumi.export("modelPath", store.model_path)
    pulumi.export("lockDigest", store.lock_digest)
    pulumi.export("modelRevision", source.revision if source.locked else "unlocked")
    entry = server.url.apply(lambda url: litellm_route(stack, url))
    pulumi.export("litellmModel", entry)
    if stack.litellm.manage == "configmap":
        k8s.core.v1.ConfigMap(
            "litellm-route",
            metadata={
                "name": f"llm-infra-route-{stack.server.resource_name}",
                "namespace": stack.litellm.namespace,
                "labels": {"app.kubernetes.io/managed-by": "llm-infra", "litellm/route": "true"},
            },
            # A model_list fragment LiteLLM's config can include (or an operator can merge).
            data=entry.apply(lambda e: {"model_list.yaml": yaml.safe_dump([e], sort_keys=False)}),
            opts=pulumi.ResourceOptions(provider=provider),
        )


def service_port(stack: StrixHaloStack) -> int:
    """The port of the server's Service."""
    return stack.server.service_port or stack.server.port


def endpoint_url(stack: StrixHaloStack) -> str:
    """The in-cluster base URL of the server's Service."""
    return service_url(stack.server.resource_name, stack.kubernetes.namespace, service_port(stack))


def litellm_route(stack: StrixHaloStack, url: str) -> dict[str, Any]:
    """The LiteLLM entry of this server (with the key from LiteLLM's env when one is required)."""
    return litellm_entry(stack.server.alias, url, api_key=stack.server.api_key)


def allowed_clients(stack: StrixHaloStack) -> list[NetworkClient] | None:
    """Who the server's NetworkPolicy admits (None: no policy)."""
    if not stack.network.policies:
        return None
    clients: list[NetworkClient] = [
        {"namespace": c.namespace, "pod_labels": dict(c.pod_labels)} for c in stack.network.clients
    ]
    return clients + [{"cidr": cidr} for cidr in stack.network.allow_cidrs]


def _probe(probe: ProbeSettings) -> HttpProbe:
    return {
        "path": probe.path,
        "initial_delay_seconds": probe.initial_delay_seconds,
        "period_seconds": probe.period_seconds,
        "failure_threshold": probe.failure_threshold,
        "timeout_seconds": probe.timeout_seconds,
    }


def store_args(
    stack: StrixHaloStack, source: ModelSource, hf_token: pulumi.Input[str] | None
) -> GgufModelStoreArgs:
    """GgufModelStore inputs from the stack config and the model lock."""
    store = stack.store
    files: list[ModelFile] = list(source.files)
    return {
        "namespace": stack.kubernetes.namespace,
        "repo": stack.model.repo,
        "revision": source.revision,
        "files": files,
        "volume_size": store.size,
        "storage_class": store.storage_class,
        "node_selector": dict(stack.server.node_selector),
        "fetch_image": store.fetch_image,
        "retired_patterns": list(store.retired_patterns),
        "parallel_downloads": store.parallel_downloads,
        "fetch_timeout_seconds": int(store.fetch_timeout_hours * 3600),
        "hf_endpoint": store.hf_endpoint,
        "hf_token": hf_token,
        "network_policy": stack.network.policies,
        "run_as_user": stack.server.run_as_user,
        "upgrade": store.upgrade,
        # The server's image and GPU access: the preflight sees the node as the server will.
        "node_preflight": {
            "image": stack.server.image,
            "gpu_access": stack.server.gpu_access,
            "min_gpu_memory_gib": stack.memory.vram_gib,
        }
        if store.node_preflight
        else None,
    }


def server_args(
    stack: StrixHaloStack, source: ModelSource, model: ModelVolume
) -> LlamaCppVulkanServerArgs:
    """LlamaCppVulkanServer inputs from the stack config and the model lock."""
    server = stack.server
    return {
        "namespace": stack.kubernetes.namespace,
        "image": server.image,
        "flags": {
            "model_path": f"{MODELS_MOUNT}/{source.files[0]['name']}",
            "alias": server.alias,
            "host": server.host,
            "port": server.port,
            "jinja": server.jinja,
            "gpu_layers": server.gpu_layers,
            "ctx_size": server.context_size,
            "parallel": server.parallel,
            "cont_batching": server.cont_batching,
            "cache_type_k": server.cache_type_k,
            "cache_type_v": server.cache_type_v,
            "temperature": server.temperature,
            "top_p": server.top_p,
            "threads": server.threads,
            "cache_ram_mib": server.cache_ram,
        },
        "model": model,
        "node_selector": dict(server.node_selector),
        "resources": {
            "requests": server.resources.requests.model_dump(),
            "limits": server.resources.limits.model_dump(),
        },
        "probes": {
            "startup": _probe(server.probes.startup),
            "readiness": _probe(server.probes.readiness),
            "liveness": _probe(server.probes.liveness),
        },
        "service_port": service_port(stack),
        "gpu_access": server.gpu_access,
        "gpu_gate": server.gpu_gate,
        "gpu_resource": server.gpu_resource,
        "run_as_user": server.run_as_user,
        "supplemental_groups": [server.render_group_id] if server.render_group_id else [],
        "allowed_clients": allowed_clients(stack),
        "metrics": monitoring(stack),
    }


def monitoring(stack: StrixHaloStack) -> KubernetesMonitoring | None:
    """The server's metrics and monitoring objects from the stack's `metrics` (None: off)."""
    metrics = stack.metrics
    if not metrics.enabled:
        return None
    alerts, reference = metrics.alerts, metrics.reference
    return {
        "scrapers": [
            {"namespace": s.namespace, "pod_labels": dict(s.pod_labels)} for s in metrics.scrapers
        ]
        if stack.network.policies
        else [],
        "monitor_kind": metrics.monitor_kind if metrics.service_monitor else None,
        "scrape_interval_seconds": metrics.scrape_interval_seconds,
        "monitor_labels": dict(metrics.monitor_labels),
        "rules": metrics.rules,
        "dashboard": metrics.dashboard,
        "dashboard_namespace": metrics.dashboard_namespace,
        "stall_minutes": alerts.stall_minutes,
        "kv_cache_ratio": alerts.kv_cache_ratio,
        "for_minutes": alerts.for_minutes,
        "reference_decode_tps": reference.decode_tps,
        "reference_aggregate_tps": {str(n): tps for n, tps in reference.aggregate_tps.items()},
        "fetch_job_pattern": fetch_job_pattern(stack.store.name),
    }
