"""The pure builders of each Kubernetes component's objects: which objects, in which order, with
which options, and the manifests they make from known inputs (no Pulumi)."""

from __future__ import annotations

from typing import Any, cast

from components.k8s.objects import KubeObject, named
from components.llamacpp.inputs import LlamaCppRpcWorkerArgs, LlamaCppVulkanServerArgs
from components.llamacpp.manifests import MODEL_ANNOTATION
from components.llamacpp.rpc_manifests import worker_objects
from components.llamacpp.server_objects import server_objects
from components.model_store.inputs import GgufModelStoreArgs
from components.model_store.objects import store_objects, store_of
from components.monitoring.inputs import METRICS_PORT
from components.validation import checked_inputs
from tests.conftest import MODEL_VOLUME
from tests.support.component_inputs import llama_server, model_store, rpc_worker

NODE_NETWORK = {"cidr": "192.168.1.0/24"}


def server(**changes: Any) -> LlamaCppVulkanServerArgs:
    """Every optional input of the server set (then `changes`), validated, defaults filled in."""
    args = {**llama_server(), **changes}
    args = {key: value for key, value in args.items() if value is not None}
    checked = checked_inputs("LlamaCppVulkanServer", "ds", args, LlamaCppVulkanServerArgs)
    return cast(LlamaCppVulkanServerArgs, checked)


def worker(given: dict[str, Any]) -> LlamaCppRpcWorkerArgs:
    """A worker's inputs, validated, defaults filled in."""
    checked = checked_inputs("LlamaCppRpcWorker", "ds-rpc-0", given, LlamaCppRpcWorkerArgs)
    return cast(LlamaCppRpcWorkerArgs, checked)


def store(given: dict[str, Any]) -> GgufModelStoreArgs:
    """A store's inputs, validated, defaults filled in."""
    return cast(
        GgufModelStoreArgs, checked_inputs("GgufModelStore", "models", given, GgufModelStoreArgs)
    )


def kinds_and_names(objects: list[KubeObject]) -> list[tuple[str, str]]:
    return [(obj.kind, obj.resource) for obj in objects]


def manifest(obj: KubeObject) -> dict[str, Any]:
    """The object's manifest in namespace `llm` (with the model volume, where it reads it)."""
    known = {"namespace": "llm", "model": dict(MODEL_VOLUME)}
    return obj.manifest(*(known[key] for key in obj.reads))


def test_a_server_with_every_option_has_every_object_in_creation_order() -> None:
    args = server(allowed_clients=[NODE_NETWORK], node_port=30080)
    assert kinds_and_names(server_objects("ds", args)) == [
        ("Secret", "ds-api-key"),
        ("ConfigMap", "ds-metrics-proxy"),
        ("Deployment", "ds-deployment"),
        ("Service", "ds-service"),
        ("Service", "ds-node-port"),
        ("NetworkPolicy", "ds-ingress"),
        ("ConfigMap", "ds-verify"),
        ("Job", "ds-verify-job"),
        ("ServiceMonitor", "ds-monitor"),
        ("PrometheusRule", "ds-alerts"),
        ("ConfigMap", "ds-dashboard"),
    ]


def test_a_server_without_options_is_a_deployment_and_a_service() -> None:
    args = server(api_key=None, allowed_clients=None, verify_expectations=None, metrics=None)
    objects = server_objects("ds", args)
    assert kinds_and_names(objects) == [("Deployment", "ds-deployment"), ("Service", "ds-service")]
    assert objects[0].after == ()


def test_the_deployment_waits_for_the_secret_and_the_script_its_pod_mounts() -> None:
    deployment = named(server_objects("ds", server()))["ds-deployment"]
    assert deployment.after == ("ds-api-key", "ds-metrics-proxy")
    assert deployment.inherit
    assert deployment.reads == ("namespace", "model")
    assert manifest(deployment)["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]


def test_the_api_key_secret_keeps_its_key_out_of_the_manifest() -> None:
    secret = named(server_objects("ds", server()))["ds-api-key"]
    assert secret.secret_data == (("api-key", "api_key"),)
    assert secret.constants == (("type", "Opaque"),)
    assert "sk-test" not in repr(manifest(secret))
    assert manifest(secret)["metadata"]["namespace"] == "llm"


def test_the_ingress_admits_clients_and_verify_on_the_api_port_scrapers_on_metrics() -> None:
    args = server(allowed_clients=[{"namespace": "litellm"}, NODE_NETWORK])
    policy = manifest(named(server_objects("ds", args))["ds-ingress"])
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "llama-server",
        "app.kubernetes.io/instance": "ds",
    }
    api, metrics = policy["spec"]["ingress"]
    assert api == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "litellm"}}},
            {"ipBlock": {"cidr": "192.168.1.0/24"}},
            {
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/instance": "ds",
                        "app.kubernetes.io/component": "verify",
                    }
                }
            },
        ],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }
    assert metrics == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "ports": [{"port": METRICS_PORT, "protocol": "TCP"}],
    }


def test_the_ingress_policy_of_no_clients_admits_only_the_verify_job() -> None:
    policy = manifest(
        named(server_objects("ds", server(allowed_clients=[], metrics=None)))["ds-ingress"]
    )
    (rule,) = policy["spec"]["ingress"]
    assert [
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in rule["from"]
    ] == ["verify"]


def test_the_ingress_policy_without_verify_or_metrics_admits_the_clients_only() -> None:
    args = server(verify_expectations=None, metrics=None)
    policy = manifest(named(server_objects("ds", args))["ds-ingress"])
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "litellm"}},
            "podSelector": {"matchLabels": {"app": "litellm"}},
        }
    ]


def test_a_server_stopped_before_a_model_change_is_replaced_not_updated() -> None:
    args = server(stop_before_model_change=True, verify_expectations=None)
    deployment = named(server_objects("ds", args))["ds-deployment"]
    assert deployment.delete_before_replace
    assert deployment.replace_on_changes == (f'metadata.annotations["{MODEL_ANNOTATION}"]',)
    annotations = manifest(deployment)["metadata"]["annotations"]
    assert annotations[MODEL_ANNOTATION] == MODEL_VOLUME["fetcher_config_map"]
    updated = named(server_objects("ds", server(verify_expectations=None)))["ds-deployment"]
    assert not updated.delete_before_replace
    assert updated.replace_on_changes == ()
    assert MODEL_ANNOTATION not in manifest(updated)["metadata"]["annotations"]


def test_the_deployment_is_awaited_past_its_own_progress_deadline() -> None:
    deployment = named(server_objects("ds", server()))["ds-deployment"]
    deadline = manifest(deployment)["spec"]["progressDeadlineSeconds"]
    assert deployment.timeout == f"{deadline + 60}s"


def test_the_verify_job_checks_the_deployment_as_built_after_it_is_ready() -> None:
    objects = named(server_objects("ds", server()))
    job, config_map = objects["ds-verify-job"], objects["ds-verify"]
    assert job.after == ("ds-deployment", "ds-service", "ds-verify")
    assert not job.inherit
    assert job.reads == config_map.reads == ("namespace", "model", "ds-deployment")
    built = manifest(objects["ds-deployment"])
    known = ("llm", dict(MODEL_VOLUME))
    name = config_map.manifest(*known, built)["metadata"]["name"]
    assert job.manifest(*known, built)["metadata"]["name"] == name
    changed = {**built, "spec": {**built["spec"], "replicas": 2}}
    assert config_map.manifest(*known, changed)["metadata"]["name"] != name


def test_the_monitoring_objects_are_custom_resources_but_the_dashboard() -> None:
    objects = named(server_objects("ds", server()))
    assert objects["ds-monitor"].api_version == "monitoring.coreos.com/v1"
    assert objects["ds-alerts"].api_version == "monitoring.coreos.com/v1"
    dashboard = objects["ds-dashboard"]
    assert dashboard.api_version is None
    assert manifest(dashboard)["metadata"]["namespace"] == "monitoring"


def test_a_worker_admits_its_head_before_its_port_exists() -> None:
    objects = worker_objects("ds-rpc-0", worker(rpc_worker()))
    assert kinds_and_names(objects) == [
        ("NetworkPolicy", "ds-rpc-0-ingress"),
        ("Deployment", "ds-rpc-0-deployment"),
        ("Service", "ds-rpc-0-service"),
    ]
    assert objects[1].after == ("ds-rpc-0-ingress",)
    (rule,) = manifest(objects[0])["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "ds"}}}]


def test_a_store_protects_its_volume_and_fetches_after_the_preflight() -> None:
    objects = store_objects(store_of("models", store(model_store())))
    assert kinds_and_names(objects) == [
        ("PersistentVolumeClaim", "models-pvc"),
        ("ConfigMap", "models-fetcher"),
        ("Secret", "models-hf-token"),
        ("Job", "models-preflight"),
        ("NetworkPolicy", "models-preflight-closed"),
        ("Job", "models-fetch"),
        ("NetworkPolicy", "models-fetch-egress"),
    ]
    by_name = named(objects)
    assert [obj.resource for obj in objects if obj.protect] == ["models-pvc"]
    assert by_name["models-pvc"].reads == ("namespace", "storage_class")
    assert by_name["models-fetch"].after == ("models-pvc", "models-fetcher", "models-preflight")
    assert by_name["models-fetch"].timeout == f"{3600 + 600}s"
    assert by_name["models-pvc"].manifest("llm", "fast")["spec"]["storageClassName"] == "fast"


def test_a_store_without_preflight_or_policy_fetches_after_its_volume_and_lock() -> None:
    given = {**model_store(), "node_preflight": None, "network_policy": False, "hf_token": None}
    objects = store_objects(store_of("models", store(given)))
    assert kinds_and_names(objects) == [
        ("PersistentVolumeClaim", "models-pvc"),
        ("ConfigMap", "models-fetcher"),
        ("Job", "models-fetch"),
    ]
    assert objects[2].after == ("models-pvc", "models-fetcher")
