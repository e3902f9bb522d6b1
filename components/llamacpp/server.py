"""LlamaCppVulkanServer: llama.cpp's llama-server (Vulkan image) as a Deployment and a Service."""

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.children import after, inherited_dependencies, kube_resources
from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.llamacpp.manifests import api_key_secret, service_url
from components.llamacpp.server_objects import server_objects
from components.llamacpp.split import head_built
from components.validation import checked_inputs

TYPE_TOKEN = "llm-infra:index:LlamaCppVulkanServer"


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
        # checked_inputs makes the provider's doubles ints where the args declare ints.
        args = checked_inputs("LlamaCppVulkanServer", name, args, LlamaCppVulkanServerArgs)
        # A split model: the workers this program built for it must be the ones it lists.
        head_built(name, args)
        super().__init__(TYPE_TOKEN, name, None, opts)
        # The namespace, the model volume and the key: known from a Python caller, outputs of
        # other resources through the provider.
        inputs = {key: args.get(key) for key in ("namespace", "model", "api_key")}
        objects = server_objects(name, args)
        made = kube_resources(objects, inputs, self, inherited_dependencies(opts))
        # Each attribute is the resource of its object, by the name the builder gave it.
        self.deployment: k8s.apps.v1.Deployment = made[f"{name}-deployment"]
        """llama-server's Deployment: one replica, Recreate."""
        self.service: k8s.core.v1.Service = made[f"{name}-service"]
        """The ClusterIP Service in front of it."""
        self.api_key_secret: k8s.core.v1.Secret | None = made.get(api_key_secret(name)[0])
        """The API key as a Secret; None without an API key."""
        self.metrics_proxy_config_map: k8s.core.v1.ConfigMap | None = made.get(
            f"{name}-metrics-proxy"
        )
        """The metrics proxy's script; None without metrics."""
        self.node_port_service: k8s.core.v1.Service | None = made.get(f"{name}-node-port")
        """The API port outside the cluster (a NodePort); None without `node_port`."""
        self.network_policy: k8s.networking.v1.NetworkPolicy | None = made.get(f"{name}-ingress")
        """Who may reach the server; None when allowed_clients is None."""
        self.verify_config_map: k8s.core.v1.ConfigMap | None = made.get(f"{name}-verify")
        """The verify script, its expectations and the expected /props; None without
        verify_expectations."""
        self.verify_job: k8s.batch.v1.Job | None = made.get(f"{name}-verify-job")
        """The post-deploy check; None without verify_expectations."""
        self.monitor: k8s.apiextensions.CustomResource | None = made.get(f"{name}-monitor")
        """The ServiceMonitor or PodMonitor; None unless metrics.monitor_kind is set."""
        self.prometheus_rule: k8s.apiextensions.CustomResource | None = made.get(f"{name}-alerts")
        """The alert rules; None unless metrics.rules."""
        self.dashboard: k8s.core.v1.ConfigMap | None = made.get(f"{name}-dashboard")
        """The Grafana dashboard ConfigMap; None unless metrics.dashboard."""
        service_port = args.get("service_port", args["flags"]["port"])
        metadata = self.service.metadata
        self.service_name = metadata.name
        self.url = pulumi.Output.all(metadata.name, metadata.namespace).apply(
            lambda values: service_url(values[0], values[1], service_port)
        )
        self.alias = after(self.deployment, args["flags"]["alias"])
        self.register_outputs(
            {"service_name": self.service_name, "url": self.url, "alias": self.alias}
        )
