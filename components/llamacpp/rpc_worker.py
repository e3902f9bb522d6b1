"""LlamaCppRpcWorker: llama.cpp's rpc-server on another GPU node, lent to one llama-server."""

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.children import inherited_dependencies, manifest_args
from components.k8s.metadata import Meta
from components.llamacpp.inputs import LlamaCppRpcWorkerArgs
from components.llamacpp.rpc_manifests import (
    rpc_endpoint,
    worker_deployment,
    worker_labels,
    worker_policy,
    worker_service,
)
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
        namespace = pulumi.Output.from_input(args["namespace"])
        labels = worker_labels(name, args["head"])
        port = args["port"]
        inherited = inherited_dependencies(opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=inherited)
        # The policy first: the port is never open to the namespace, even for a moment.
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-ingress",
            **manifest_args(
                namespace.apply(
                    lambda ns: worker_policy(
                        Meta(f"{name}-ingress", ns, labels), port, args["head_pod_labels"]
                    )
                ),
                "metadata",
                "spec",
            ),
            opts=child,
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            **manifest_args(
                namespace.apply(lambda ns: worker_deployment(Meta(name, ns, labels), args)),
                "metadata",
                "spec",
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*inherited, self.network_policy]),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            **manifest_args(
                namespace.apply(lambda ns: worker_service(Meta(name, ns, labels), port)),
                "metadata",
                "spec",
            ),
            opts=child,
        )
        metadata = self.service.metadata
        self.service_name = metadata.name
        self.endpoint = pulumi.Output.all(metadata.name, metadata.namespace).apply(
            lambda values: rpc_endpoint(values[0], values[1], port)
        )
        self.register_outputs({"service_name": self.service_name, "endpoint": self.endpoint})
