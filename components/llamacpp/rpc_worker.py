"""LlamaCppRpcWorker: llama.cpp's rpc-server on another GPU node, lent to one llama-server."""

from typing import Annotated, Literal, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from components.grammars import (
    AbsolutePath,
    DnsLabel,
    ExtendedResource,
    ImageReference,
    LabelKey,
    LabelValue,
    Port,
    Quantity,
    ResourceName,
)
from components.k8s.children import inherited_dependencies, manifest_args, with_integers
from components.llamacpp.rpc_manifests import (
    RPC_PORT,
    rpc_endpoint,
    worker_deployment,
    worker_labels,
    worker_policy,
    worker_service,
)
from components.validation import Input, checked_inputs, documented

TYPE_TOKEN = "llm-infra:index:LlamaCppRpcWorker"


@documented
class LlamaCppRpcWorkerArgs(TypedDict):
    """Inputs of LlamaCppRpcWorker."""

    namespace: Input[DnsLabel]
    """Namespace of the worker's objects (the server's: its policy admits pods of it)."""
    image: ImageReference
    """Image holding rpc-server, the same llama.cpp build as the server's, with -DGGML_RPC=ON."""
    head: DnsLabel
    """Name of the server (the head) this worker serves: labels its objects."""
    head_pod_labels: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    """Labels of the head's pods: the only pods the worker's NetworkPolicy admits (never empty:
    that would admit every pod of the namespace to an rpc-server without authentication)."""
    node_selector: dict[LabelKey, LabelValue]
    """Node labels the pod must match (the worker's GPU node)."""
    resources: dict[Literal["requests", "limits"], dict[ResourceName, Quantity]]
    """Container requests and limits (`{"requests": {...}, "limits": {...}}`)."""
    binary: NotRequired[AbsolutePath]
    """rpc-server inside the image (default `/app/ggml-rpc-server`)."""
    port: NotRequired[Port]
    """rpc-server's port, of the container and the Service (default 50052)."""
    threads: NotRequired[Annotated[int, Field(ge=1, le=4096)] | None]
    """`-t`: CPU threads of rpc-server (default: rpc-server's own)."""
    gpu_device_path: NotRequired[AbsolutePath]
    """Host path of the DRM render nodes mounted in `privileged` mode (default `/dev/dri`)."""
    gpu_access: NotRequired[Literal["privileged", "device-plugin"]]
    """`privileged` + hostPath /dev/dri (default), or `device-plugin` (no privileges at all)."""
    gpu_resource: NotRequired[ExtendedResource]
    """Extended resource requested in `device-plugin` mode (default `amd.com/gpu`)."""
    run_as_user: NotRequired[Annotated[int, Field(ge=1, le=2**31 - 1)]]
    """Non-root uid in `device-plugin` mode (default 10001)."""
    supplemental_groups: NotRequired[list[Annotated[int, Field(ge=0, le=2**31 - 1)]]]
    """Extra groups of the pod: the node's render group GID for a non-root Vulkan client."""


class LlamaCppRpcWorker(pulumi.ComponentResource):
    """rpc-server pinned to one node, reachable by its head's pods only (it has no auth)."""

    service_name: pulumi.Output[str]
    """Name of the worker's Service."""
    endpoint: pulumi.Output[str]
    """`host:port` as the head's `--rpc` lists it."""

    def __init__(
        self, name: str, args: LlamaCppRpcWorkerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        args = checked_inputs(
            "LlamaCppRpcWorker",
            name,
            with_integers(args, LlamaCppRpcWorkerArgs),
            LlamaCppRpcWorkerArgs,
        )
        super().__init__(TYPE_TOKEN, name, None, opts)
        namespace = pulumi.Output.from_input(args["namespace"])
        labels = worker_labels(name, args["head"])
        port = args.get("port", RPC_PORT)
        inherited = inherited_dependencies(opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=inherited)
        # The policy first: the port is never open to the namespace, even for a moment.
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-ingress",
            **manifest_args(
                namespace.apply(
                    lambda ns: worker_policy(
                        f"{name}-ingress", ns, labels, port, args["head_pod_labels"]
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
                namespace.apply(lambda ns: worker_deployment(name, ns, labels, args)),
                "metadata",
                "spec",
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*inherited, self.network_policy]),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            **manifest_args(
                namespace.apply(lambda ns: worker_service(name, ns, labels, port)),
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
