"""LlamaCppRpcWorker: llama.cpp's rpc-server on another GPU node, lent to one llama-server."""

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.children import inherited_dependencies, kube_resources
from components.llamacpp.inputs import LlamaCppRpcWorkerArgs
from components.llamacpp.rpc_manifests import rpc_endpoint, worker_objects
from components.llamacpp.split import worker_built
from components.validation import checked_inputs

TYPE_TOKEN = "llm-infra:index:LlamaCppRpcWorker"


class LlamaCppRpcWorker(pulumi.ComponentResource):
    """rpc-server pinned to one node, reachable by its head's pods only (it has no auth)."""

    service_name: pulumi.Output[str]
    """Name of the worker's Service."""
    endpoint: pulumi.Output[str]
    """`host:port` as the head's `--rpc` lists it."""

    def __init__(
        self, name: str, args: LlamaCppRpcWorkerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # checked_inputs makes the provider's doubles ints where the args declare ints.
        args = checked_inputs("LlamaCppRpcWorker", name, args, LlamaCppRpcWorkerArgs)
        # Its head, when this program built it first: it admits the head, the head lists it.
        worker_built(name, args)
        super().__init__(TYPE_TOKEN, name, None, opts)
        made = kube_resources(
            worker_objects(name, args),
            {"namespace": args["namespace"]},
            self,
            inherited_dependencies(opts),
        )
        self.network_policy: k8s.networking.v1.NetworkPolicy = made[f"{name}-ingress"]
        """Ingress from the head's pods only, on the RPC port; no egress at all."""
        self.deployment: k8s.apps.v1.Deployment = made[f"{name}-deployment"]
        """rpc-server's Deployment, pinned to its node."""
        self.service: k8s.core.v1.Service = made[f"{name}-service"]
        """The worker's Service: its name in the head's `--rpc` list."""
        port = args["port"]
        metadata = self.service.metadata
        self.service_name = metadata.name
        self.endpoint = pulumi.Output.all(metadata.name, metadata.namespace).apply(
            lambda values: rpc_endpoint(values[0], values[1], port)
        )
        self.register_outputs({"service_name": self.service_name, "endpoint": self.endpoint})
