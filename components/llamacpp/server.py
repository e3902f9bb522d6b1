"""LlamaCppVulkanServer: llama.cpp's llama-server (Vulkan image) as a Deployment and a Service."""

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.children import after, inherited_dependencies, manifest_args
from components.k8s.metadata import Meta
from components.k8s.network_policies import ingress_policy
from components.k8s.verify_job import (
    verify_config_map,
    verify_digest,
    verify_job,
    verify_pod_labels,
)
from components.llamacpp.expected_props import expected_props
from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.llamacpp.manifests import (
    MODEL_ANNOTATION,
    api_key_secret,
    node_port_service,
    progress_deadline_seconds,
    selector_labels,
    server_deployment,
    server_labels,
    server_service,
    service_url,
    stop_before_model_change,
)
from components.llamacpp.monitoring import monitoring_spec
from components.llamacpp.split import head_built
from components.model_store.inputs import ModelVolume
from components.monitoring.manifests import (
    MONITORING_API,
    dashboard_config_map,
    metrics_port,
    metrics_proxy_config_map,
    prometheus_rule,
    proxy_source,
    service_monitor,
)
from components.payloads import HTTP_POLICY_SOURCE, PROPS_SOURCE, VERIFY_SOURCE
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
        namespace = pulumi.Output.from_input(args["namespace"])
        # Known strings from a Python caller; outputs of the store through the provider.
        model = pulumi.Output.from_input(args["model"])
        flags = args["flags"]
        port = flags["port"]
        service_port = args.get("service_port", port)
        labels = server_labels(name)
        inherited = inherited_dependencies(opts)
        api_key = args.get("api_key")

        self.api_key_secret: k8s.core.v1.Secret | None = None
        """The API key as a Secret; None without an API key."""
        if api_key is not None:
            secret_name, secret_key = api_key_secret(name)
            self.api_key_secret = k8s.core.v1.Secret(
                secret_name,
                metadata={"name": secret_name, "namespace": namespace, "labels": labels},
                type="Opaque",
                string_data={secret_key: pulumi.Output.secret(api_key)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
        metrics = args.get("metrics")
        self.metrics_proxy_config_map: k8s.core.v1.ConfigMap | None = None
        """The metrics proxy's script; None without metrics."""
        if metrics is not None:
            proxy = namespace.apply(
                lambda ns: metrics_proxy_config_map(Meta(name, ns, labels), proxy_source())
            )
            self.metrics_proxy_config_map = k8s.core.v1.ConfigMap(
                f"{name}-metrics-proxy",
                **manifest_args(proxy, "metadata", "data", "immutable"),
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
        pod_needs = [
            child
            for child in (self.api_key_secret, self.metrics_proxy_config_map)
            if child is not None
        ]
        stop_first = args["stop_before_model_change"]

        def deployment_of(values: list[Any]) -> dict[str, Any]:
            ns, volume = values
            deployment = server_deployment(Meta(name, ns, labels), _with_model(args, volume))
            return stop_before_model_change(deployment, volume) if stop_first else deployment

        deployment = pulumi.Output.all(namespace, model).apply(deployment_of)
        # The Deployment's own progressDeadlineSeconds, which pulumi-kubernetes must outwait.
        deadline = progress_deadline_seconds(args)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            **manifest_args(deployment, "metadata", "spec"),
            opts=pulumi.ResourceOptions(
                parent=self,
                # Children do not inherit dependsOn: the pod must wait for what the server waits
                # for (the fetch Job), not start early and crash-loop on a missing model.
                depends_on=[*inherited, *pod_needs],
                # pulumi-kubernetes waits 10 min by default; the load alone may take longer.
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{deadline + 60}s", update=f"{deadline + 60}s"
                ),
                # replace: the old Deployment and its pods are gone before the new one exists.
                delete_before_replace=stop_first or None,
                replace_on_changes=[f'metadata.annotations["{MODEL_ANNOTATION}"]']
                if stop_first
                else None,
            ),
        )
        scrape_port = metrics_port(metrics) if metrics is not None else None
        service = namespace.apply(
            lambda ns: server_service(Meta(name, ns, labels), service_port, scrape_port)
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            **manifest_args(service, "metadata", "spec"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
        )
        node_port = args.get("node_port")
        self.node_port_service: k8s.core.v1.Service | None = None
        """The API port outside the cluster (a NodePort); None without `node_port`."""
        if node_port is not None:
            exposed = namespace.apply(
                lambda ns: node_port_service(
                    Meta(f"{name}-node-port", ns, labels), service_port, node_port
                )
            )
            self.node_port_service = k8s.core.v1.Service(
                f"{name}-node-port",
                **manifest_args(exposed, "metadata", "spec"),
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
        expectations = args.get("verify_expectations")
        clients = args.get("allowed_clients")

        self.network_policy: k8s.networking.v1.NetworkPolicy | None = None
        """Who may reach the server; None when allowed_clients is None."""
        if clients is not None:

            def admitted(ns: str) -> dict[str, Any]:
                policy = ingress_policy(
                    Meta(f"{name}-ingress", ns, labels), selector_labels(labels), port, clients
                )
                if expectations is not None:
                    # The verify Job, in the server's own namespace, must reach it too.
                    policy["spec"]["ingress"][0]["from"].append(
                        {"podSelector": {"matchLabels": verify_pod_labels(name)}}
                    )
                if metrics is not None:
                    # A NetworkPolicy admits ports, not paths: scrapers reach only the metrics
                    # proxy's port, which serves /metrics and nothing of the API.
                    scrapers = ingress_policy(
                        Meta(name, ns, labels), {}, metrics_port(metrics), list(metrics["scrapers"])
                    )["spec"]["ingress"]
                    policy["spec"]["ingress"] += scrapers
                return policy

            self.network_policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-ingress",
                **manifest_args(namespace.apply(admitted), "metadata", "spec"),
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )

        self.verify_config_map: k8s.core.v1.ConfigMap | None = None
        """The verify script, its expectations and the expected /props; None without
        verify_expectations."""
        self.verify_job: k8s.batch.v1.Job | None = None
        """The post-deploy check; None without verify_expectations."""
        if expectations is not None:
            verify_source = VERIFY_SOURCE.read_text()
            policy_source = HTTP_POLICY_SOURCE.read_text()
            props_source = PROPS_SOURCE.read_text()
            # What /props must say: from the args the Deployment's argv is made of.
            props = expected_props(args)

            def check(values: list[Any]) -> dict[str, dict[str, Any]]:
                ns, volume, built = values
                sources = verify_source + policy_source + props_source
                digest = verify_digest(expectations, sources, built, props)
                check_name = f"{name}-verify-{digest}"
                check_meta = Meta(check_name, ns, labels)
                job = verify_job(
                    check_meta,
                    image=args.get("verify_image", volume["check_image"]),
                    config_map=check_name,
                    url=service_url(name, ns, service_port),
                    api_key_secret=api_key_secret(name) if api_key is not None else None,
                    run_as_user=args["run_as_user"],
                    min_decode_tps=args.get("min_decode_tps"),
                    check_props=True,
                )
                config_map = verify_config_map(
                    check_meta,
                    expectations,
                    verify_source,
                    policy_source,
                    props_source=props_source,
                    expected_props=props,
                )
                return {"config_map": config_map, "job": job}

            checks = pulumi.Output.all(namespace, model, deployment).apply(check)
            self.verify_config_map = k8s.core.v1.ConfigMap(
                f"{name}-verify",
                **manifest_args(checks["config_map"], "metadata", "data", "immutable"),
                opts=pulumi.ResourceOptions(parent=self, depends_on=inherited),
            )
            self.verify_job = k8s.batch.v1.Job(
                f"{name}-verify-job",
                **manifest_args(checks["job"], "metadata", "spec"),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    # After the Deployment is Ready: a failed check fails `pulumi up`.
                    depends_on=[self.deployment, self.service, self.verify_config_map],
                    custom_timeouts=pulumi.CustomTimeouts(create="20m", update="20m"),
                    delete_before_replace=True,
                ),
            )
        self._monitoring(name, namespace, labels, args, inherited)
        metadata = self.service.metadata
        self.service_name = metadata.name
        self.url = pulumi.Output.all(metadata.name, metadata.namespace).apply(
            lambda values: service_url(values[0], values[1], service_port)
        )
        self.alias = after(self.deployment, flags["alias"])
        self.register_outputs(
            {"service_name": self.service_name, "url": self.url, "alias": self.alias}
        )

    def _monitoring(
        self,
        name: str,
        namespace: pulumi.Output[str],
        labels: dict[str, str],
        args: LlamaCppVulkanServerArgs,
        inherited: list[pulumi.Resource],
    ) -> None:
        self.monitor: k8s.apiextensions.CustomResource | None = None
        """The ServiceMonitor or PodMonitor; None unless metrics.monitor_kind is set."""
        self.prometheus_rule: k8s.apiextensions.CustomResource | None = None
        """The alert rules; None unless metrics.rules."""
        self.dashboard: k8s.core.v1.ConfigMap | None = None
        """The Grafana dashboard ConfigMap; None unless metrics.dashboard."""
        metrics = args.get("metrics")
        if metrics is None:
            return
        opts = pulumi.ResourceOptions(parent=self, depends_on=inherited)
        spec = namespace.apply(lambda ns: monitoring_spec(name, ns, args, metrics))
        kind = metrics.get("monitor_kind")
        if kind:
            monitor = namespace.apply(
                lambda ns: service_monitor(Meta(name, ns, labels), selector_labels(labels), metrics)
            )
            self.monitor = k8s.apiextensions.CustomResource(
                f"{name}-monitor",
                # Plain strings: they make the resource's type token.
                api_version=MONITORING_API,
                kind=kind,
                metadata=monitor["metadata"],
                spec=monitor["spec"],
                opts=opts,
            )
        if metrics["rules"]:
            rule = pulumi.Output.all(namespace, spec).apply(
                lambda values: prometheus_rule(
                    Meta(f"{name}-alerts", values[0], labels), values[1], metrics
                )
            )
            self.prometheus_rule = k8s.apiextensions.CustomResource(
                f"{name}-alerts",
                api_version=MONITORING_API,
                kind="PrometheusRule",
                metadata=rule["metadata"],
                spec=rule["spec"],
                opts=opts,
            )
        if metrics["dashboard"]:
            home = metrics.get("dashboard_namespace")
            board = pulumi.Output.all(namespace, spec).apply(
                lambda values: dashboard_config_map(
                    Meta(f"{name}-dashboard", home or values[0], labels), values[1]
                )
            )
            self.dashboard = k8s.core.v1.ConfigMap(
                f"{name}-dashboard", **manifest_args(board, "metadata", "data"), opts=opts
            )


def _with_model(args: LlamaCppVulkanServerArgs, model: ModelVolume) -> LlamaCppVulkanServerArgs:
    return {**args, "model": model}
