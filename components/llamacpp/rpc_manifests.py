"""Pure builders of LlamaCppRpcWorker: rpc-server's argv, its Deployment, Service and policy.

rpc-server has no authentication: whoever reaches its port can read and write the node's GPU
memory and run graphs on it. So its NetworkPolicy admits the head's pods only, on that one port,
and lets the worker reach nothing; its Service carries labels of its own, never the API's.
"""

from functools import partial
from typing import Any

from components.k8s import pod_security
from components.k8s.metadata import Meta, app_labels, object_head
from components.k8s.network_policies import network_policy, tcp_port
from components.k8s.objects import KubeObject
from components.llamacpp.gpu_access import PodGpu, pod_gpu
from components.llamacpp.inputs import LlamaCppRpcWorkerArgs
from components.llamacpp.manifests import (
    ROLE_LABEL,
    WORKER_ROLE,
    cluster_ip_service,
    gpu_pod_anti_affinity,
)


def worker_objects(name: str, args: LlamaCppRpcWorkerArgs) -> list[KubeObject]:
    """A worker's objects, in the order they are created: the policy first, so that the port is
    never open to the namespace, even for a moment."""
    labels = worker_labels(name, args["head"])
    policy = f"{name}-ingress"
    return [
        KubeObject(policy, "NetworkPolicy", partial(_policy, name, labels, args)),
        KubeObject(
            f"{name}-deployment",
            "Deployment",
            partial(_deployment, name, labels, args),
            after=(policy,),
        ),
        KubeObject(f"{name}-service", "Service", partial(_service, name, labels, args)),
    ]


def _policy(
    name: str, labels: dict[str, str], args: LlamaCppRpcWorkerArgs, namespace: str
) -> dict[str, Any]:
    meta = Meta(f"{name}-ingress", namespace, labels)
    return worker_policy(meta, args["port"], args["head_pod_labels"])


def _deployment(
    name: str, labels: dict[str, str], args: LlamaCppRpcWorkerArgs, namespace: str
) -> dict[str, Any]:
    return worker_deployment(Meta(name, namespace, labels), args)


def _service(
    name: str, labels: dict[str, str], args: LlamaCppRpcWorkerArgs, namespace: str
) -> dict[str, Any]:
    return worker_service(Meta(name, namespace, labels), args["port"])


def worker_labels(name: str, head: str) -> dict[str, str]:
    """Labels of a worker's objects; the first two select its pod (never the API Service's)."""
    return app_labels("llama-rpc-server", name, part_of=head)


def worker_selector(labels: dict[str, str]) -> dict[str, str]:
    """The labels that select a worker's pod."""
    return {k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}


def rpc_server_argv(args: LlamaCppRpcWorkerArgs) -> list[str]:
    """rpc-server's command line: every interface (the policy admits only the head), one port."""
    argv = [args["binary"], "-H", "0.0.0.0", "-p", str(args["port"])]
    threads = args.get("threads")
    if threads is not None:
        argv += ["-t", str(threads)]
    return argv


def rpc_endpoint(service: str, namespace: str, port: int) -> str:
    """A worker as llama-server's `--rpc` names it: `host:port` (its Service's DNS name)."""
    return f"{service}.{namespace}.svc:{port}"


# rpc-server serves one client at a time with a listen backlog of 1 (b11434's
# `ggml_backend_rpc_start_server`): while the head is connected a probe's connection waits
# unaccepted, the next ones are dropped, and a TCP liveness probe would restart the worker
# under a serving head. So the worker has no probes: rpc-server exits when it fails.
NO_PROBE_SKIPS = [
    (check, "rpc-server accepts one client at a time: a probe would queue behind the head and "
     "fail; the container exits when rpc-server does")
    for check in ("CKV_K8S_8", "CKV_K8S_9")
]  # fmt: skip


def worker_container(args: LlamaCppRpcWorkerArgs, gpu: PodGpu) -> dict[str, Any]:
    """The rpc-server container, with the same GPU access as the server's."""
    return {
        "name": "rpc-server",
        "image": gpu.image,
        "command": rpc_server_argv(args),
        "env": gpu.env,
        "ports": [{"name": "rpc", "containerPort": args["port"], "protocol": "TCP"}],
        "resources": gpu.resources,
        "securityContext": gpu.security,
        "volumeMounts": [pod_security.scratch_mount(), *gpu.mounts],
    }


def worker_deployment(meta: Meta, args: LlamaCppRpcWorkerArgs) -> dict[str, Any]:
    """One replica pinned to its node, Recreate (one GPU: a second pod could never start)."""
    gpu = pod_gpu(args)
    volumes = [pod_security.scratch_volume(), *gpu.volumes]
    skips = pod_security.image_skips(gpu.image) + NO_PROBE_SKIPS + gpu.skips
    return {
        **object_head("apps/v1", "Deployment", meta, pod_security.checkov_skips(skips)),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": worker_selector(meta.labels)},
            "template": {
                "metadata": {"labels": {**meta.labels, ROLE_LABEL: WORKER_ROLE}},
                "spec": {
                    "nodeSelector": args["node_selector"],
                    "affinity": gpu_pod_anti_affinity(),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": pod_security.restricted_pod(args.get("supplemental_groups")),
                    "containers": [worker_container(args, gpu)],
                    "volumes": volumes,
                },
            },
        },
    }


def worker_service(meta: Meta, port: int) -> dict[str, Any]:
    """ClusterIP Service of one worker: its stable name in the head's `--rpc` list."""
    return cluster_ip_service(meta, worker_selector(meta.labels), "rpc", port)


def worker_policy(meta: Meta, port: int, head_pod_labels: dict[str, str]) -> dict[str, Any]:
    """Ingress from the head's pods only, on the RPC port; no egress at all."""
    from_head = {
        "from": [{"podSelector": {"matchLabels": dict(head_pod_labels)}}],
        "ports": [tcp_port(port)],
    }
    selector = worker_selector(meta.labels)
    return network_policy(meta, selector, ["Ingress", "Egress"], [from_head], [])
