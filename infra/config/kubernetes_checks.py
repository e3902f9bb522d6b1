"""Rules of a kubernetes stack that involve more than one key (names, network, RPC, metrics)."""

from __future__ import annotations

import re

from components.addresses import covers_every_address
from components.extra_args import located
from components.llamacpp.inputs import (
    extra_args_problems,
    runtime_record,
    server_runtime_problems,
    worker_runtime_problems,
)
from components.payloads.fetcher import retire_pattern_problem
from infra.config.base import (
    image_problems,
    is_pattern,
    quantity_value,
    shard_set_problems,
    stack_placement_problems,
)
from infra.config.inputs import component_problems
from infra.config.kubernetes import (
    SERVER_NAME_MAX,
    STORE_NAME_MAX,
    KubernetesStack,
    NodeMemory,
    structure_problems,
)
from infra.config.server import ResourceSettings, RuntimeSettings


def runtime_problems(stack: KubernetesStack, where: str = "") -> list[str]:
    """The server's runtime against its image and keys: the components' own rules
    (components/llamacpp/inputs.py) in the stack file's words, and the node preflight, which
    checks a Vulkan device. `where`: whence a tuned runtime came (`tuned (the winner ...)`)."""
    server = stack.server
    if server.runtime == "tuned":
        if server.image is not None:
            return [
                "server.image: set while server.runtime: tuned takes the image from the tune "
                "record's winner (drop server.image, or name the runtime)"
            ]
        return []
    named = {"runtime": runtime_record(server.declared_runtime)} if server.named_runtime else {}
    head = {
        "image": server.server_image,
        **named,
        "gpu_access": server.gpu_access,
        "flags": {"gpu_layers": server.gpu_layers, "rpc": ["rpc"] if server.rpc else None},
    }
    problems = component_problems("LlamaCppVulkanServer", server_runtime_problems(head))
    if server.rpc is not None and server.rpc.image is not None:
        worker = {"image": server.rpc.image, **named, "gpu_access": server.gpu_access}
        problems += component_problems("LlamaCppRpcWorker", worker_runtime_problems(worker))
    runtime = server.effective_runtime
    if stack.store.node_preflight and runtime.backend != "vulkan":
        problems.append(
            "store.nodePreflight: checks a Vulkan device in the server image (llama-server "
            f"--list-devices); the runtime {runtime.name!r} ({runtime.backend}) is not checked "
            "by it (set store.nodePreflight: false)"
        )
    if where:
        key = "server.runtime: "
        problems = [
            f"{key}{where}: {p.removeprefix(key)}" if p.startswith(key) else f"{p} ({key}{where})"
            for p in problems
        ]
    return problems


def kubernetes_name_problems(stack: KubernetesStack) -> list[str]:
    """Names that would not be valid Kubernetes names once the components derive theirs."""
    problems = []
    server = stack.server
    key = "server.name" if server.name else "server.alias"
    name = server.resource_name
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        problems.append(
            f"{key}: {name!r} is not a Kubernetes name (lowercase letters, digits and -, starting "
            "with a letter)" + ("; set server.name" if key == "server.alias" else "")
        )
    elif len(name) > SERVER_NAME_MAX:
        problems.append(
            f"{key}: {name!r} is {len(name)} characters; the server's objects add up to 16 "
            f"(`-verify-<digest>`), so at most {SERVER_NAME_MAX}"
            + ("; set a shorter server.name" if key == "server.alias" else "")
        )
    if len(stack.store.name) > STORE_NAME_MAX:
        problems.append(
            f"store.name: {stack.store.name!r} is {len(stack.store.name)} characters; the fetch "
            f"Job and ConfigMap add 17 (`-fetcher-<digest>`), so at most {STORE_NAME_MAX}"
        )
    return problems


def cross_checks(stack: KubernetesStack) -> list[str]:
    """Rules of a kubernetes stack that involve more than one key."""
    server, model = stack.server, stack.model
    # The server component's own rule, before the plan reads the words.
    problems = component_problems(
        "LlamaCppVulkanServer",
        located(
            extra_args_problems(server.extra_args, server.cache_type_v, server.gpu_gate),
            "extra_args",
        ),
    )
    if not any(is_pattern(path) for path in model.files):
        problems += shard_set_problems(model.file_names, key="model.files")
    # Exact model.files are checked here; names a lock resolves, by the plan (infra.plan.stack).
    exact = [] if any(is_pattern(path) for path in model.files) else model.file_names
    for index, pattern in enumerate(stack.store.retired_patterns):
        problem = retire_pattern_problem(pattern, exact)
        if problem:
            problems.append(f"store.retiredPatterns[{index}]: {problem}")
    problems += structure_problems(server, model.architecture, model.layers, model.metadata)
    if server.context_size < server.min_slot_context:
        problems.append(
            f"server.contextSize: {server.context_size} is below the {server.min_slot_context} "
            "tokens server.minSlotContext requires of a slot (raise server.contextSize, or set "
            "server.minSlotContext to what a slot needs)"
        )
    elif server.context_size // server.parallel < server.min_slot_context:
        per_slot = server.context_size // server.parallel
        problems.append(
            f"server.parallel: {server.parallel} slots leave {per_slot} tokens per slot, below the "
            f"required {server.min_slot_context} of server.minSlotContext (raise "
            f"server.contextSize to {server.min_slot_context * server.parallel}, lower "
            "server.parallel, or lower server.minSlotContext)"
        )
    images = [("store.fetchImage", stack.store.fetch_image, stack.store.allow_floating_image)]
    if server.image is not None:
        images.insert(0, ("server.image", server.image, server.allow_floating_image))
    elif isinstance(server.runtime, RuntimeSettings) and server.runtime.digest is None:
        runtime_image = server.runtime.image
        images.insert(0, ("server.runtime.image", runtime_image, server.allow_floating_image))
    for key, image, allowed in images:
        problems += image_problems(
            key,
            image,
            allowed,
            "a build tag such as server-vulkan-b11434, a full version, or a digest",
            "server.allowFloatingImage" if key.startswith("server.") else None,
        )
    problems += runtime_problems(stack)
    startup = server.probes.startup
    if startup.window_seconds < server.min_load_seconds:
        problems.append(
            f"server.probes.startup: allows {startup.window_seconds}s to load, less than "
            f"server.minLoadSeconds {server.min_load_seconds}s (raise failureThreshold)"
        )
    if server.gpu_access == "privileged" and server.render_group_id is not None:
        problems.append(
            "server.renderGroupId: only used with server.gpuAccess: device-plugin (a privileged "
            "container reaches /dev/dri as root)"
        )
    network = stack.network
    if covers_every_address(list(network.allow_cidrs)) and not network.allow_world:
        problems.append(
            f"network.allowCidrs: {list(network.allow_cidrs)} together admit every address, so "
            "the NetworkPolicy protects nothing (list the node addresses, or set "
            "network.allowWorld: true)"
        )
    problems += node_memory_problems(stack.memory.node)
    if network.node_port is not None and not network.policies:
        problems.append(
            f"network.nodePort: {network.node_port} exposes the server outside the cluster with "
            "network.policies: false, so every address would reach it (keep the policies, and "
            "list the outside networks in network.allowCidrs)"
        )
    elif network.node_port is not None and not network.allow_cidrs:
        problems.append(
            f"network.nodePort: {network.node_port} exposes the server outside the cluster, but "
            "network.allowCidrs is empty, so the NetworkPolicy admits no outside client (list "
            "the networks to admit, e.g. 192.168.1.0/24)"
        )
    problems += kubernetes_name_problems(stack)
    problems += rpc_problems(stack)
    problems += metrics_problems(stack)
    if stack.network.policies and not stack.network.clients:
        problems.append(
            "network.clients: empty, so nothing could reach the server (list the client "
            "namespaces, e.g. litellm, or set network.policies: false)"
        )
    problems += request_limit_problems("server.resources", server.resources)
    return problems


def node_memory_problems(node: NodeMemory | None, key: str = "memory.node") -> list[str]:
    """A node whose carve-out and reserve leave its pods no RAM."""
    if node is None or node.pod_gib > 0:
        return []
    return [
        f"{key}: carveOutGib {node.carve_out_gib:g} and reservedGib {node.reserved_gib:g} leave "
        f"nothing of ramGib {node.ram_gib:g} for the server (ramGib is the RAM installed, the "
        "carve-out included)"
    ]


def request_limit_problems(key: str, resources: ResourceSettings) -> list[str]:
    """A cpu or memory request above its limit (Kubernetes refuses such a pod), under `key`."""
    problems = []
    for resource in ("cpu", "memory"):
        request = getattr(resources.requests, resource)
        limit = getattr(resources.limits, resource)
        if quantity_value(request) > quantity_value(limit):
            problems.append(f"{key}.requests.{resource}: {request} is more than the limit {limit}")
    return problems


def rpc_problems(stack: KubernetesStack) -> list[str]:
    """Rules of a split model: RPC-enabled images, workers on other nodes, distinct names."""
    server, rpc = stack.server, stack.server.rpc
    if rpc is None:
        return []
    problems = []
    # The images' RPC backend: the components' rule (components/llamacpp/inputs.py).
    if rpc.image is not None:
        problems += image_problems(
            "server.rpc.image",
            rpc.image,
            server.allow_floating_image,
            "the server's own build (a tag with the build number, or a digest)",
        )
    names = server.rpc_worker_names
    for index, (worker, name) in enumerate(zip(rpc.workers, names, strict=True)):
        key = f"server.rpc.workers[{index}]"
        if name == server.resource_name or names.index(name) != index:
            problems.append(
                f"{key}.name: {name!r} is already the name of the server or of another worker"
            )
        elif len(name) > SERVER_NAME_MAX:
            problems.append(f"{key}.name: {name!r} is longer than {SERVER_NAME_MAX} characters")
        problems += request_limit_problems(f"{key}.resources", worker.resources)
    if rpc.port == server.port:
        problems.append(f"server.rpc.port: {rpc.port} is the server's own port (server.port)")
    problems += stack_placement_problems(
        [
            ("server.nodeSelector", server.node_selector),
            *[
                (f"server.rpc.workers[{index}].nodeSelector", worker.node_selector)
                for index, worker in enumerate(rpc.workers)
            ],
        ]
    )
    return problems


def metrics_problems(stack: KubernetesStack) -> list[str]:
    """Metrics settings that contradict each other or the network settings."""
    metrics = stack.metrics
    problems = []
    if not metrics.enabled:
        for key, on in (
            ("serviceMonitor", metrics.service_monitor),
            ("rules", metrics.rules),
            # On by default: a contradiction only when the stack asks for it.
            ("dashboard", metrics.dashboard and "dashboard" in metrics.model_fields_set),
        ):
            if on:
                problems.append(
                    f"metrics.{key}: true needs the server's /metrics (set metrics.enabled: true, "
                    f"or metrics.{key}: false)"
                )
    elif stack.network.policies and not metrics.scrapers:
        problems.append(
            "metrics.scrapers: empty, so the NetworkPolicy admits no scraper (list the "
            "monitoring namespace, e.g. monitoring, or set metrics.enabled: false)"
        )
    return problems
