"""Which stack-file key each component input comes from, so the stack file names its own keys.

The components check their inputs themselves (`components.validation`); when a stack file's
values reach a component and one is refused there, the problem is reported under the stack
file's key (`server.contextSize`), not the component's input (`flags.ctx_size`).
"""

from __future__ import annotations

import re

from pydantic.alias_generators import to_camel as camel

from components.validation import ComponentInputError, Location, Problem, named, snake_path

STACK_KEYS: dict[str, dict[str, str]] = {
    "LlamaCppVulkanServer": {
        "namespace": "kubernetes.namespace",
        "image": "server.image",
        "runtime": "server.runtime",
        "flags.alias": "server.alias",
        "flags.port": "server.port",
        "flags.gpu_layers": "server.gpuLayers",
        "flags.ctx_size": "server.contextSize",
        "flags.parallel": "server.parallel",
        "flags.cache_type_k": "server.cacheTypeK",
        "flags.cache_type_v": "server.cacheTypeV",
        "flags.temperature": "server.temperature",
        "flags.top_p": "server.topP",
        "flags.top_k": "server.topK",
        "flags.min_p": "server.minP",
        "flags.log_verbosity": "server.gpuGate",
        "flags.log_file": "server.gpuGate",
        "extra_args": "server.extraArgs",
        "flags.threads": "server.threads",
        "flags.cache_ram_mib": "server.cacheRam",
        "node_selector": "server.nodeSelector",
        "service_port": "server.servicePort",
        "probes.startup": "server.probes.startup",
        "probes.readiness": "server.probes.readiness",
        "probes.liveness": "server.probes.liveness",
        "gpu_access": "server.gpuAccess",
        "gpu_resource": "server.gpuResource",
        "run_as_user": "server.runAsUser",
        "min_decode_tps": "server.minDecodeTps",
        "allowed_clients": "network.clients",
        "node_port": "network.nodePort",
        "flags.model_path": "model.files",
        "flags.metrics": "metrics.enabled",
        "flags.host": "server.host",
        "flags.jinja": "server.jinja",
        "flags.cont_batching": "server.contBatching",
        "flags.repack": "server.repack",
        "flags.speculative": "server.speculative",
        "flags.rpc": "server.rpc.workers",
        "flags.tensor_split": "server.rpc.workers",
        "model.claim_name": "store.name",
        "model.fetcher_config_map": "store.name",
        "model.check_image": "store.fetchImage",
        "model.run_as_user": "server.runAsUser",
        "model.model_file": "model.files",
        "model.model_bytes": "model.files",
        "resources": "server.resources",
        "gpu_gate": "server.gpuGate",
        "supplemental_groups": "server.renderGroupId",
        "api_key": "apiKey",
        "metrics": "metrics",
        "metrics.monitor_kind": "metrics.monitorKind",
        "metrics.fetch_job_pattern": "store.name",
        "disk_read_mibps": "memory.diskReadMibps",
        "init_seconds": "memory.initSeconds",
        "verify_expectations": "server.verifyAfterUp",
        "stop_before_model_change": "store.upgrade",
    },
    "LlamaCppRpcWorker": {
        "namespace": "kubernetes.namespace",
        "image": "server.rpc.image",
        "runtime": "server.runtime",
        "head": "server.name",
        "node_selector": "server.rpc.workers",
        "resources": "server.rpc.workers",
        "binary": "server.rpc.binary",
        "port": "server.rpc.port",
        "threads": "server.rpc.workers",
        "gpu_access": "server.gpuAccess",
        "gpu_resource": "server.gpuResource",
        "run_as_user": "server.runAsUser",
        "supplemental_groups": "server.renderGroupId",
    },
    "GgufModelStore": {
        "namespace": "kubernetes.namespace",
        "repo": "model.repo",
        "revision": "model.revision",
        "files": "model.files",
        "volume_size": "store.size",
        "storage_class": "store.storageClass",
        "fetch_image": "store.fetchImage",
        "retired_patterns": "store.retiredPatterns",
        "parallel_downloads": "store.parallelDownloads",
        "hf_endpoint": "store.hfEndpoint",
        "allow_token_over_http": "store.allowTokenOverHttp",
        "upgrade": "store.upgrade",
        "node_selector": "server.nodeSelector",
        "fetch_timeout_seconds": "store.fetchTimeoutHours",
        "hf_token": "hfToken",
        "network_policy": "network.policies",
        "run_as_user": "server.runAsUser",
        "node_preflight": "store.nodePreflight",
        "node_preflight.image": "server.image",
        "node_preflight.gpu_access": "server.gpuAccess",
        "node_preflight.min_gpu_memory_gib": "memory.vramGib",
        "node_preflight.cpu_variant": "memory.nodeCpu",
    },
    "VllmRocmServer": {
        "connection.host": "host.address",
        "connection.user": "host.user",
        "connection.port": "host.port",
        "connection.host_key": "host.hostKey",
        "connection.insecure_ignore_host_key": "host.insecureIgnoreHostKey",
        "model_dir": "host.modelDir",
        "base_dir": "host.baseDir",
        "requirements.min_free_disk_gib": "host.minFreeDiskGib",
        "requirements.min_ram_gib": "host.minRamGib",
        "image": "server.image",
        "flags.served_model_name": "server.servedModelName",
        "flags.port": "server.port",
        "flags.tensor_parallel_size": "server.tensorParallelSize",
        "flags.max_model_len": "server.maxModelLen",
        "flags.max_num_batched_tokens": "server.maxNumBatchedTokens",
        "flags.kv_cache_memory_bytes": "server.kvCacheMemoryBytes",
        "flags.kv_offloading_size_gib": "server.kvOffloadingSize",
        "flags.kv_offloading_backend": "server.kvOffloadingBackend",
        "flags.max_num_seqs": "server.maxNumSeqs",
        "flags.kv_cache_dtype": "server.kvCacheDtype",
        "flags.reasoning_parser": "server.reasoningParser",
        "flags.tool_call_parser": "server.toolCallParser",
        # vLLM listens on the compose network at server.port (its address is the program's).
        "flags.host": "server.port",
        "startup_timeout_seconds": "server.startupTimeoutSeconds",
        "caddy.site": "caddy.site",
        "caddy.tls": "caddy.tls",
        "caddy.acme_email": "caddy.acmeEmail",
        "caddy.allowed_cidrs": "caddy.allowedCidrs",
        "caddy.allow_world": "caddy.allowWorld",
        "caddy.image": "caddy.image",
        "patches": "patches",
        "connection.private_key": "sshPrivateKey",
        "model_lock.repo": "model.repo",
        "model_lock.revision": "model.revision",
        "model_lock.files": "model.files",
        "model_lock.unresolved_patterns": "model.files",
        "fetch_image": "fetchImage",
        "flags.model": "host.modelDir",
        "flags": "server",
        "flags.speculative_config": "server.speculative",
        "flags.enable_prefix_caching": "server.prefixCaching",
        "api_key": "apiKey",
        "metrics": "metrics",
        "metrics.gpu_exporter_image": "metrics.gpuExporter.image",
        "min_decode_tps": "server.minDecodeTps",
        "verify_expectations": "server.verifyAfterUp",
        "extra_args": "server.extraArgs",
    },
}
"""Per component, component input path → the stack file's key it is made from."""


def _camel(part: str | int) -> str | int:
    """An input's name as the stack file spells it; a map key (a label) as it is."""
    if isinstance(part, str) and re.fullmatch(r"[a-z][a-z0-9_]*", part):
        return str(camel(part))
    return part


def stack_key(component: str, loc: Location) -> str:
    """The stack-file key of a component input, or the input named with its component."""
    keys = STACK_KEYS.get(component, {})
    for cut in range(len(loc), 0, -1):
        prefix = snake_path(loc[:cut])
        if prefix in keys:
            # The stack file spells its keys in camelCase, below a mapped key too.
            rest = snake_path(tuple(_camel(p) for p in loc[cut:]))
            return keys[prefix] + (rest if rest.startswith("[") or not rest else f".{rest}")
    return f"{component}.{snake_path(loc)}"


def stack_problems(error: ComponentInputError) -> list[str]:
    """A component's refusal as the stack file's `key: problem` lines."""
    return component_problems(error.component, error.problems)


def component_problems(component: str, problems: list[Problem]) -> list[str]:
    """A component rule's problems (run by the stack file before the component exists) as
    the stack file's `key: problem` lines."""

    def key(loc: Location) -> str:
        return stack_key(component, loc)

    return [f"{key(loc)}: {named(message, key)}" for loc, message in problems]
