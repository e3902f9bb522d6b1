"""Pure builder of LlamaCppVulkanServer's objects: which ones a server of these inputs has, each
with its manifest and options, in the order they are created.

Each manifest is made from the known namespace (and model volume), which may reach the server
as outputs; the container, pod, Deployment and Service themselves are built in `manifests.py`.
"""

from dataclasses import dataclass
from functools import partial
from typing import Any

from components.k8s.metadata import Meta, object_head
from components.k8s.network_policies import client_peers, ingress_rules, network_policy
from components.k8s.objects import KubeObject
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
from components.model_store.inputs import ModelVolume
from components.monitoring.inputs import KubernetesMonitoring
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

WITH_MODEL = ("namespace", "model")
"""What the pod's objects are made of: the namespace and the model volume."""
CONFIG_MAP_FIELDS = ("metadata", "data", "immutable")


@dataclass(frozen=True)
class Server:
    """What every object of one server is made from: its name, its inputs and its labels."""

    name: str
    args: LlamaCppVulkanServerArgs
    labels: dict[str, str]

    def meta(self, object_name: str, namespace: str) -> Meta:
        """The head of one of its objects."""
        return Meta(object_name, namespace, self.labels)


def server_objects(name: str, args: LlamaCppVulkanServerArgs) -> list[KubeObject]:
    """Every object of a server of these validated inputs, in the order they are created."""
    server = Server(name, args, server_labels(name))
    objects: list[KubeObject] = []
    if args.get("api_key") is not None:
        secret, key = api_key_secret(name)
        objects.append(
            KubeObject(
                secret,
                "Secret",
                partial(_api_key_secret, server, secret),
                fields=("metadata",),
                constants=(("type", "Opaque"),),
                secret_data=((key, "api_key"),),
            )
        )
    metrics = args.get("metrics")
    if metrics is not None:
        proxy = partial(_metrics_proxy_config_map, server)
        objects.append(
            KubeObject(f"{name}-metrics-proxy", "ConfigMap", proxy, fields=CONFIG_MAP_FIELDS)
        )
    # Children do not inherit dependsOn: the pod must wait for what the server waits for (the
    # fetch Job) and for the Secret and script it mounts, not start early and crash-loop.
    objects.append(_deployment_object(server, after=tuple(o.resource for o in objects)))
    service_port = args.get("service_port", args["flags"]["port"])
    scrape_port = metrics_port(metrics) if metrics is not None else None
    service = partial(_service, server, service_port, scrape_port)
    objects.append(KubeObject(f"{name}-service", "Service", service))
    node_port = args.get("node_port")
    if node_port is not None:
        exposed = partial(_node_port_service, server, service_port, node_port)
        objects.append(KubeObject(f"{name}-node-port", "Service", exposed))
    if args.get("allowed_clients") is not None:
        policy = partial(server_policy, server)
        objects.append(KubeObject(f"{name}-ingress", "NetworkPolicy", policy))
    expectations = args.get("verify_expectations")
    if expectations is not None:
        objects += _verify_objects(server, expectations, service_port)
    if metrics is not None:
        objects += _monitoring_objects(server, metrics)
    return objects


def deployment_manifest(server: Server, namespace: str, model: ModelVolume) -> dict[str, Any]:
    """The server's Deployment, marked for replacement on a new model when it stops first."""
    args: LlamaCppVulkanServerArgs = {**server.args, "model": model}
    deployment = server_deployment(server.meta(server.name, namespace), args)
    if args["stop_before_model_change"]:
        return stop_before_model_change(deployment, model)
    return deployment


def server_policy(server: Server, namespace: str) -> dict[str, Any]:
    """Who may reach the server: its clients (and the verify Job's pods) on the API port, and
    the scrapers on the metrics port only."""
    args = server.args
    peers = client_peers(list(args.get("allowed_clients") or []))
    if args.get("verify_expectations") is not None:
        # The verify Job, in the server's own namespace, must reach it too.
        peers.append({"podSelector": {"matchLabels": verify_pod_labels(server.name)}})
    rules = ingress_rules(args["flags"]["port"], peers)
    metrics = args.get("metrics")
    if metrics is not None:
        # A NetworkPolicy admits ports, not paths: scrapers reach only the metrics proxy's
        # port, which serves /metrics and nothing of the API.
        rules += ingress_rules(metrics_port(metrics), client_peers(list(metrics["scrapers"])))
    meta = server.meta(f"{server.name}-ingress", namespace)
    return network_policy(meta, selector_labels(server.labels), ["Ingress"], rules)


def _deployment_object(server: Server, after: tuple[str, ...]) -> KubeObject:
    stop_first = server.args["stop_before_model_change"]
    # pulumi-kubernetes waits 10 min by default; the load alone may take longer, and it must
    # outwait the Deployment's own progressDeadlineSeconds.
    timeout = f"{progress_deadline_seconds(server.args) + 60}s"
    return KubeObject(
        f"{server.name}-deployment",
        "Deployment",
        partial(deployment_manifest, server),
        reads=WITH_MODEL,
        after=after,
        timeout=timeout,
        # replace: the old Deployment and its pods are gone before the new one exists.
        delete_before_replace=stop_first,
        replace_on_changes=(f'metadata.annotations["{MODEL_ANNOTATION}"]',) if stop_first else (),
    )


@dataclass(frozen=True)
class VerifyCheck:
    """What the verify Job runs and checks, besides the Deployment: its ConfigMap's files."""

    expectations: str
    verify_source: str
    policy_source: str
    props_source: str
    props: dict[str, Any]
    """What /props must say: from the args the Deployment's argv is made of."""
    service_port: int

    def name(self, server: str, deployment: dict[str, Any]) -> str:
        """The check's ConfigMap and Job: a new one whenever what it checks changes."""
        sources = self.verify_source + self.policy_source + self.props_source
        return (
            f"{server}-verify-{verify_digest(self.expectations, sources, deployment, self.props)}"
        )


def _verify_objects(server: Server, expectations: str, service_port: int) -> list[KubeObject]:
    check = VerifyCheck(
        expectations,
        VERIFY_SOURCE.read_text(),
        HTTP_POLICY_SOURCE.read_text(),
        PROPS_SOURCE.read_text(),
        expected_props(server.args),
        service_port,
    )
    config_map = f"{server.name}-verify"
    # Named after the Deployment it checks, as built.
    reads = (*WITH_MODEL, f"{server.name}-deployment")
    return [
        KubeObject(
            config_map,
            "ConfigMap",
            partial(_verify_config_map, server, check),
            reads=reads,
            fields=CONFIG_MAP_FIELDS,
        ),
        KubeObject(
            f"{server.name}-verify-job",
            "Job",
            partial(_verify_job, server, check),
            reads=reads,
            # After the Deployment is Ready: a failed check fails `pulumi up`.
            after=(f"{server.name}-deployment", f"{server.name}-service", config_map),
            inherit=False,
            timeout="20m",
            delete_before_replace=True,
        ),
    ]


def _verify_config_map(
    server: Server, check: VerifyCheck, namespace: str, _: ModelVolume, built: dict[str, Any]
) -> dict[str, Any]:
    meta = server.meta(check.name(server.name, built), namespace)
    return verify_config_map(
        meta,
        check.expectations,
        check.verify_source,
        check.policy_source,
        props_source=check.props_source,
        expected_props=check.props,
    )


def _verify_job(
    server: Server, check: VerifyCheck, namespace: str, model: ModelVolume, built: dict[str, Any]
) -> dict[str, Any]:
    args = server.args
    check_name = check.name(server.name, built)
    return verify_job(
        server.meta(check_name, namespace),
        image=args.get("verify_image", model["check_image"]),
        config_map=check_name,
        url=service_url(server.name, namespace, check.service_port),
        api_key_secret=api_key_secret(server.name) if args.get("api_key") is not None else None,
        run_as_user=args["run_as_user"],
        min_decode_tps=args.get("min_decode_tps"),
        check_props=True,
    )


def _monitoring_objects(server: Server, metrics: KubernetesMonitoring) -> list[KubeObject]:
    name = server.name
    objects = []
    kind = metrics.get("monitor_kind")
    if kind:
        monitor = partial(_monitor, server, metrics)
        objects.append(KubeObject(f"{name}-monitor", kind, monitor, api_version=MONITORING_API))
    if metrics["rules"]:
        rule = partial(_prometheus_rule, server, metrics)
        objects.append(
            KubeObject(f"{name}-alerts", "PrometheusRule", rule, api_version=MONITORING_API)
        )
    if metrics["dashboard"]:
        board = partial(_dashboard, server, metrics)
        objects.append(
            KubeObject(f"{name}-dashboard", "ConfigMap", board, fields=("metadata", "data"))
        )
    return objects


def _api_key_secret(server: Server, secret: str, namespace: str) -> dict[str, Any]:
    """The API key's Secret, less what the resource is given as it is: its type and its data."""
    return object_head("v1", "Secret", server.meta(secret, namespace))


def _service(server: Server, port: int, scrape_port: int | None, namespace: str) -> dict[str, Any]:
    return server_service(server.meta(server.name, namespace), port, scrape_port)


def _node_port_service(server: Server, port: int, node_port: int, namespace: str) -> dict[str, Any]:
    return node_port_service(server.meta(f"{server.name}-node-port", namespace), port, node_port)


def _metrics_proxy_config_map(server: Server, namespace: str) -> dict[str, Any]:
    return metrics_proxy_config_map(server.meta(server.name, namespace), proxy_source())


def _monitor(server: Server, metrics: KubernetesMonitoring, namespace: str) -> dict[str, Any]:
    meta = server.meta(server.name, namespace)
    return service_monitor(meta, selector_labels(server.labels), metrics)


def _prometheus_rule(
    server: Server, metrics: KubernetesMonitoring, namespace: str
) -> dict[str, Any]:
    spec = monitoring_spec(server.name, namespace, server.args, metrics)
    return prometheus_rule(server.meta(f"{server.name}-alerts", namespace), spec, metrics)


def _dashboard(server: Server, metrics: KubernetesMonitoring, namespace: str) -> dict[str, Any]:
    spec = monitoring_spec(server.name, namespace, server.args, metrics)
    home = metrics.get("dashboard_namespace") or namespace
    return dashboard_config_map(server.meta(f"{server.name}-dashboard", home), spec)
