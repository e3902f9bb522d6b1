"""LlamaCppVulkanServer: llama.cpp's llama-server (Vulkan image) as a Deployment and a Service."""

from typing import NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.children import inherited_dependencies, without_kind
from components.gguf_model_store import ModelVolume
from components.llamacpp_manifests import (
    API_KEY_FILE,
    LlamaServerFlags,
    ServerProbes,
    selector_labels,
    server_deployment,
    server_labels,
    server_service,
    service_url,
)
from components.network_policies import NetworkClient, ingress_policy
from components.payloads import VERIFY_SOURCE
from components.pod_security import DEFAULT_UID
from components.verify_job import verify_config_map, verify_digest, verify_job, verify_pod_labels

TYPE_TOKEN = "llm-infra:index:LlamaCppVulkanServer"


class LlamaCppVulkanServerArgs(TypedDict):
    """Inputs of LlamaCppVulkanServer."""

    namespace: str
    """Namespace of the Deployment and Service."""
    image: str
    """Server image, pinned to a build (`server-vulkan-b11434`)."""
    flags: LlamaServerFlags
    """llama-server flags."""
    model: ModelVolume
    """The model volume and its init check."""
    node_selector: dict[str, str]
    """Node labels the pod must match (the GPU node)."""
    resources: dict[str, dict[str, str]]
    """Container requests and limits (`{"requests": {...}, "limits": {...}}`)."""
    probes: ServerProbes
    """Startup, readiness and liveness probes."""
    service_port: NotRequired[int]
    """Port of the Service (default: the server port)."""
    gpu_device_path: NotRequired[str]
    """Host path of the DRM render nodes mounted in `privileged` mode (default `/dev/dri`)."""
    # Plain str, not a Literal: Pulumi's component schema inference knows no Literal types.
    gpu_access: NotRequired[str]
    """`privileged` + hostPath /dev/dri (default), or `device-plugin` (no privileges at all)."""
    gpu_resource: NotRequired[str]
    """Extended resource requested in `device-plugin` mode (default `amd.com/gpu`)."""
    run_as_user: NotRequired[int]
    """Non-root uid in `device-plugin` mode (default 1000)."""
    supplemental_groups: NotRequired[list[int]]
    """Extra groups of the pod: the node's render group GID for a non-root Vulkan client."""
    api_key: NotRequired[pulumi.Input[str] | None]
    """`--api-key-file`: API key clients must send as a Bearer token; stored as a Kubernetes
    Secret, read from a file.
    """
    allowed_clients: NotRequired[list[NetworkClient] | None]
    """Who may reach the server (a NetworkPolicy); None creates no policy."""
    gpu_gate: NotRequired[bool]
    """Startup probe that passes only when the load log shows the layers on a Vulkan device."""
    verify_expectations: NotRequired[str | None]
    """Recorded expectations (`llm-infra verify --record`): a Job checks the answers after up."""
    verify_image: NotRequired[str]
    """Pinned stock Python image of the verify Job (default: the model check's image)."""
    min_decode_tps: NotRequired[float | None]
    """Decode-speed floor the verify Job enforces (tok/s): catches a silent CPU fallback."""


class LlamaCppVulkanServer(pulumi.ComponentResource):
    """llama-server on one GPU node: a Recreate Deployment with a load-aware startup probe."""

    service_name: pulumi.Output[str]
    """Name of the Service."""
    url: pulumi.Output[str]
    """In-cluster base URL, e.g. `http://name.namespace.svc:8080`."""
    alias: pulumi.Output[str]
    """The model id the server reports."""

    def __init__(
        self, name: str, args: LlamaCppVulkanServerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        namespace = args["namespace"]
        flags = args["flags"]
        port = flags["port"]
        service_port = args.get("service_port", port)
        labels = server_labels(name)
        inherited = inherited_dependencies(opts)
        api_key = args.get("api_key")
        if api_key is not None:
            self.api_key_secret = k8s.core.v1.Secret(
                f"{name}-api-key",
                metadata={"name": f"{name}-api-key", "namespace": namespace, "labels": labels},
                type="Opaque",
                string_data={API_KEY_FILE: pulumi.Output.secret(api_key)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
        deployment = server_deployment(name, namespace, labels, args)
        deadline = deployment["spec"]["progressDeadlineSeconds"]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            **without_kind(deployment),
            opts=pulumi.ResourceOptions(
                parent=self,
                # Children do not inherit dependsOn: the pod must wait for what the server waits
                # for (the fetch Job), not start early and crash-loop on a missing model.
                depends_on=[*inherited, *([self.api_key_secret] if api_key is not None else [])],
                # pulumi-kubernetes waits 10 min by default; the load alone may take longer.
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{deadline + 60}s", update=f"{deadline + 60}s"
                ),
            ),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            **without_kind(server_service(name, namespace, labels, port, service_port)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
        )
        expectations = args.get("verify_expectations")
        clients = args.get("allowed_clients")
        if clients is not None:
            policy = ingress_policy(
                f"{name}-ingress", namespace, labels, selector_labels(labels), port, clients
            )
            if expectations is not None:
                # The verify Job, in the server's own namespace, must reach it too.
                policy["spec"]["ingress"][0]["from"].append(
                    {"podSelector": {"matchLabels": verify_pod_labels(name)}}
                )
            self.network_policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-ingress",
                **without_kind(policy),
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
        if expectations is not None:
            verify_source = VERIFY_SOURCE.read_text()
            digest = verify_digest(expectations, verify_source, deployment)
            check_name = f"{name}-verify-{digest}"
            self.verify_config_map = k8s.core.v1.ConfigMap(
                f"{name}-verify",
                **without_kind(
                    verify_config_map(check_name, namespace, labels, expectations, verify_source)
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
            job = verify_job(
                check_name,
                namespace,
                labels,
                image=args.get("verify_image", args["model"]["check_image"]),
                config_map=check_name,
                url=service_url(name, namespace, service_port),
                api_key_secret=(f"{name}-api-key", API_KEY_FILE) if api_key is not None else None,
                run_as_user=args.get("run_as_user", DEFAULT_UID),
                min_decode_tps=args.get("min_decode_tps"),
            )
            self.verify_job = k8s.batch.v1.Job(
                f"{name}-verify-job",
                **without_kind(job),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    # After the Deployment is Ready: a failed check fails `pulumi up`.
                    depends_on=[self.deployment, self.service, self.verify_config_map],
                    custom_timeouts=pulumi.CustomTimeouts(create="20m", update="20m"),
                    delete_before_replace=True,
                ),
            )
        self.service_name = pulumi.Output.from_input(name)
        self.url = pulumi.Output.from_input(service_url(name, namespace, service_port))
        self.alias = pulumi.Output.from_input(flags["alias"])
        self.register_outputs(
            {"service_name": self.service_name, "url": self.url, "alias": self.alias}
        )
