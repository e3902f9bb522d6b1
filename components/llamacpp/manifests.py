"""Pure builders of LlamaCppVulkanServer: llama-server argv, probes, the Deployment and Service."""

# Over ~400 lines: the server's container, pod, Deployment and Service builders share their
# constants; how a pod reaches its GPU is gpu_access.py, the worker's objects rpc_manifests.py.

from collections.abc import Mapping
from typing import Any

from components.k8s.metadata import Meta, app_labels, object_head
from components.k8s.pod_security import (
    checkov_skips,
    image_skips,
    restricted_pod,
    scratch_mount,
    scratch_volume,
)
from components.llamacpp.flags import FLAGS, number
from components.llamacpp.gate import probe_command, server_command
from components.llamacpp.gpu_access import PodGpu, pod_gpu
from components.llamacpp.inputs import (
    API_KEY_OPTION,
    HttpProbe,
    LlamaCppSpeculative,
    LlamaCppVulkanServerArgs,
    LlamaServerFlags,
)
from components.model_store.inputs import MODELS_MOUNT
from components.model_store.manifests import model_check_container, model_volumes
from components.monitoring.manifests import (
    METRICS_PORT_NAME,
    metrics_port,
    metrics_proxy_container,
    metrics_proxy_volume,
    proxy_source,
    scrape_annotations,
)
from components.payloads.gate_decode import DECODE_TIMEOUT_S
from components.validation import with_defaults

# Time granted for pulling the server image (about 2 GB) before the model load starts.
IMAGE_PULL_ALLOWANCE_S = 600


API_KEY_MOUNT = "/run/secrets/llama-server"


GATE_LOG = "/logs/llama-server.log"


API_KEY_FILE = "api-key"


def service_url(service: str, namespace: str, port: int) -> str:
    """In-cluster base URL of a Service."""
    return f"http://{service}.{namespace}.svc:{port}"


ROLE_LABEL = "llm-infra/role"
"""On the pod templates of servers and RPC workers only (never on a Job's pods): the
anti-affinity keeps two of them off one node, and a worker admits only `server` pods."""
SERVER_ROLE = "server"
WORKER_ROLE = "rpc-worker"


def head_pod_labels(name: str) -> dict[str, str]:
    """The labels only the server Deployment's pods carry (the verify Job's pods do not)."""
    return {**selector_labels(server_labels(name)), ROLE_LABEL: SERVER_ROLE}


def gpu_pod_anti_affinity() -> dict[str, Any]:
    """A server or worker pod never shares a node with another: selectors alone cannot prove
    two pods land apart (one GPU per node)."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {
                                "key": ROLE_LABEL,
                                "operator": "In",
                                "values": [SERVER_ROLE, WORKER_ROLE],
                            }
                        ]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


MODEL_ANNOTATION = "llm-infra/model"
"""The model volume's fetcher ConfigMap (named after the lock) on a Deployment that is stopped
before a model change (`stop_before_model_change`): a new model replaces the Deployment."""


def stop_before_model_change(deployment: dict[str, Any], model: Any) -> dict[str, Any]:
    """The Deployment of a server whose volume's old model may be deleted (upgrade: replace):
    replaced, not updated, on a new model, and not awaited (its pod waits in its init check
    for the model the fetch Job that follows it puts in place)."""
    metadata = deployment["metadata"]
    annotations = {
        **metadata.get("annotations", {}),
        MODEL_ANNOTATION: model["fetcher_config_map"],
        "pulumi.com/skipAwait": "true",
    }
    return {**deployment, "metadata": {**metadata, "annotations": annotations}}


def server_labels(name: str) -> dict[str, str]:
    """Labels of the server's objects; the first two are the selector."""
    return app_labels("llama-server", name)


def llama_server_args(flags: LlamaServerFlags) -> list[str]:
    """The llama-server argv (flags only: the image's entrypoint is llama-server): each field as
    `FLAGS` writes it, in its order, then speculative decoding's."""
    values: Mapping[str, Any] = with_defaults(flags, LlamaServerFlags)
    argv = [
        word for field, flag in FLAGS.items() for word in flag.words(flag.option, values.get(field))
    ]
    spec = flags.get("speculative")
    if spec:
        argv += speculative_args(spec)
    return argv


def draft_loaded(flags: LlamaServerFlags) -> bool:
    """Whether llama-server loads a draft model (whose load the gate checks too)."""
    spec = flags.get("speculative")
    return bool(spec and spec.get("draft_model_path"))


def speculative_args(spec: LlamaCppSpeculative) -> list[str]:
    """`--spec-type` and the `--spec-draft-*` settings it has (a draft model wholly on the GPU)."""
    argv = ["--spec-type", spec["method"]]
    for key, flag in (
        ("num_speculative_tokens", "--spec-draft-n-max"),
        ("min_speculative_tokens", "--spec-draft-n-min"),
        ("min_probability", "--spec-draft-p-min"),
        ("draft_model_path", "--spec-draft-model"),
    ):
        value = spec.get(key)
        if value is not None:
            argv += [flag, number(value) if isinstance(value, float) else str(value)]
    if spec.get("draft_model_path"):
        argv += ["--spec-draft-ngl", "all"]
    return argv


def kubernetes_args(argv: list[str]) -> list[str]:
    """Container args exactly as argv words: the kubelet expands `$(NAME)` in them (HOME is set
    here), and `$$` is its escape of a plain `$`."""
    return [word.replace("$", "$$") for word in argv]


def http_probe(probe: HttpProbe, port: str | int) -> dict[str, Any]:
    """A Kubernetes httpGet probe."""
    return {
        "httpGet": {"path": probe["path"], "port": port},
        "initialDelaySeconds": probe["initial_delay_seconds"],
        "periodSeconds": probe["period_seconds"],
        "failureThreshold": probe["failure_threshold"],
        "timeoutSeconds": probe["timeout_seconds"],
    }


def probe_window_seconds(probe: HttpProbe) -> int:
    """Longest time a probe tolerates failures before it counts as failed."""
    return probe["initial_delay_seconds"] + probe["period_seconds"] * probe["failure_threshold"]


def selector_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels that select the server's pods."""
    return {k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}


def api_key_mount() -> dict[str, Any]:
    """The API key Secret's volume, read-only at API_KEY_MOUNT."""
    return {"name": "api-key", "mountPath": API_KEY_MOUNT, "readOnly": True}


def server_flags(args: LlamaCppVulkanServerArgs) -> LlamaServerFlags:
    """The flags the container runs with: the GPU gate's load log and metrics added."""
    flags = args["flags"]
    if args["gpu_gate"]:
        flags = {**flags, "log_verbosity": 4, "log_file": GATE_LOG}
    if args.get("metrics") is not None:
        flags = {**flags, "metrics": True}
    return flags


def server_argv(args: LlamaCppVulkanServerArgs) -> list[str]:
    """llama-server's argv words: the rendered flags, the API key file, then the extra args."""
    argv = llama_server_args(server_flags(args))
    if args.get("api_key") is not None:
        argv += [API_KEY_OPTION, f"{API_KEY_MOUNT}/{API_KEY_FILE}"]
    return argv + list(args.get("extra_args") or [])


def server_container(args: LlamaCppVulkanServerArgs) -> dict[str, Any]:
    """The llama-server container."""
    return _server_container(args, pod_gpu(args))


def _server_container(args: LlamaCppVulkanServerArgs, gpu: PodGpu) -> dict[str, Any]:
    flags = server_flags(args)
    probes = args["probes"]
    gate = args["gpu_gate"]
    argv = server_argv(args)
    startup = http_probe(probes["startup"], "http")
    if gate:
        # Not Ready (and `pulumi up` fails) unless llama-server put the layers on a GPU: a
        # broken Vulkan driver or a missing render group otherwise serves from the CPU.
        del startup["httpGet"]
        # The script's curls take up to 5 s (/health) and DECODE_TIMEOUT_S (the first decode,
        # which may compile the backend's kernels); the probe must allow both and the greps.
        startup["timeoutSeconds"] = max(startup["timeoutSeconds"], DECODE_TIMEOUT_S + 15)
        key_file = f"{API_KEY_MOUNT}/{API_KEY_FILE}" if args.get("api_key") is not None else None
        startup["exec"] = {
            "command": probe_command(
                GATE_LOG,
                flags["gpu_layers"],
                health_url=f"http://127.0.0.1:{flags['port']}",
                device_prefix=gpu.runtime.device_prefix,
                rpc_endpoints=flags.get("rpc") or (),
                api_key_file=key_file,
                draft=draft_loaded(flags),
            )
        }
    mounts = [
        {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True},
        scratch_mount(),
    ]
    if gate:
        mounts.append({"name": "logs", "mountPath": GATE_LOG.rsplit("/", 1)[0]})
    if args.get("api_key") is not None:
        mounts.append(api_key_mount())
    mounts += gpu.mounts
    container: dict[str, Any] = {"name": "llama-server", "image": gpu.image}
    if gate:
        # --log-file through a FIFO: the file keeps the load (the probe's evidence), never traffic.
        container["command"] = server_command(GATE_LOG)
    return {
        **container,
        "args": kubernetes_args(argv),
        "env": gpu.env,
        "ports": [{"name": "http", "containerPort": flags["port"], "protocol": "TCP"}],
        "resources": gpu.resources,
        "startupProbe": startup,
        "readinessProbe": http_probe(probes["readiness"], "http"),
        "livenessProbe": http_probe(probes["liveness"], "http"),
        "securityContext": gpu.security,
        "volumeMounts": mounts,
    }


def progress_deadline_seconds(args: LlamaCppVulkanServerArgs) -> int:
    """The Deployment's progressDeadlineSeconds: the image pull, then the startup probe's window."""
    return IMAGE_PULL_ALLOWANCE_S + probe_window_seconds(args["probes"]["startup"])


def server_deployment(meta: Meta, args: LlamaCppVulkanServerArgs) -> dict[str, Any]:
    """The Deployment: one replica, Recreate (one GPU), a deadline that covers pull and load."""
    name = meta.name
    model = args["model"]
    selector = selector_labels(meta.labels)
    deadline = progress_deadline_seconds(args)
    gpu = pod_gpu(args)
    volumes = [
        *model_volumes(model["claim_name"], model["fetcher_config_map"], read_only=True),
        scratch_volume(),
        *gpu.volumes,
    ]
    if args["gpu_gate"]:
        # Holds only the load log (at most gate.LOAD_LOG_LIMIT): -lv 4 traffic never lands here.
        volumes.append({"name": "logs", "emptyDir": {"sizeLimit": "4Gi"}})
    if args.get("api_key") is not None:
        volumes.append(
            {
                "name": "api-key",
                "secret": {
                    "secretName": api_key_secret(name)[0],
                    "defaultMode": _key_mode(args, gpu),
                },
            }
        )
    if args.get("metrics") is not None:
        volumes.append(metrics_proxy_volume(name, proxy_source()))
    return {
        **object_head("apps/v1", "Deployment", meta, checkov_skips(_deployment_skips(args, gpu))),
        "spec": {
            "replicas": 1,
            # A rolling update would start a second pod that can never get the one GPU.
            "strategy": {"type": "Recreate"},
            "progressDeadlineSeconds": deadline,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": _pod_metadata(meta.labels, args),
                "spec": {
                    "nodeSelector": args["node_selector"],
                    "affinity": gpu_pod_anti_affinity(),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": _pod_security(args, gpu),
                    "initContainers": [
                        model_check_container(model["check_image"], model["run_as_user"]),
                        *(
                            [
                                model_check_container(
                                    model["check_image"], model["run_as_user"], True
                                )
                            ]
                            if model.get("draft_file")
                            else []
                        ),
                    ],
                    "containers": _pod_containers(name, args, gpu),
                    "volumes": volumes,
                },
            },
        },
    }


def api_key_secret(name: str) -> tuple[str, str]:
    """The API key's Secret and key, for what reads it from the environment (verify, the proxy)."""
    return f"{name}-api-key", API_KEY_FILE


def _non_root_key_reader(args: LlamaCppVulkanServerArgs, gpu: PodGpu) -> bool:
    """A server that runs as a non-root user (not privileged) and reads the API key file."""
    return gpu.mode != "privileged" and args.get("api_key") is not None


def _key_mode(args: LlamaCppVulkanServerArgs, gpu: PodGpu) -> int:
    """The key file's mode: owner-only for a root server; group-readable for a non-root one,
    whose pod's fsGroup then owns the file (a Secret's files are otherwise root's)."""
    return 0o440 if _non_root_key_reader(args, gpu) else 0o400


def _pod_security(args: LlamaCppVulkanServerArgs, gpu: PodGpu) -> dict[str, Any]:
    context = restricted_pod(args.get("supplemental_groups"))
    if _non_root_key_reader(args, gpu):
        # The kubelet gives the Secret's files to this group; OnRootMismatch keeps it from
        # walking a model volume whose owner already matches (the fetch Job's fsGroup).
        context["fsGroup"] = args["run_as_user"]
        context["fsGroupChangePolicy"] = "OnRootMismatch"
    return context


def _pod_containers(name: str, args: LlamaCppVulkanServerArgs, gpu: PodGpu) -> list[dict[str, Any]]:
    """llama-server, and with metrics the metrics-only proxy beside it."""
    containers = [_server_container(args, gpu)]
    metrics = args.get("metrics")
    if metrics is not None:
        containers.append(
            metrics_proxy_container(
                metrics,
                image=args["model"]["check_image"],
                server_port=args["flags"]["port"],
                api_key_secret=api_key_secret(name) if args.get("api_key") is not None else None,
                run_as_user=args["run_as_user"],
            )
        )
    return containers


def _pod_metadata(labels: dict[str, str], args: LlamaCppVulkanServerArgs) -> dict[str, Any]:
    pod_labels = {**labels, ROLE_LABEL: SERVER_ROLE}
    metrics = args.get("metrics")
    if metrics is None:
        return {"labels": pod_labels}
    return {"labels": pod_labels, "annotations": scrape_annotations(metrics_port(metrics))}


def _deployment_skips(args: LlamaCppVulkanServerArgs, gpu: PodGpu) -> list[tuple[str, str]]:
    """The checkov findings this Deployment accepts, each with its reason."""
    return image_skips(gpu.image) + image_skips(args["model"]["check_image"]) + gpu.skips


def node_port_service(meta: Meta, port: int, node_port: int) -> dict[str, Any]:
    """The API port on every node's address at `node_port` (the metrics port stays inside).
    `externalTrafficPolicy: Local`: kube-proxy delivers to the node's own pod without SNAT, so
    the pod sees the client's address and the NetworkPolicy's networks decide who gets in."""
    service = cluster_ip_service(meta, selector_labels(meta.labels), "http", port)
    service["spec"]["type"] = "NodePort"
    service["spec"]["externalTrafficPolicy"] = "Local"
    service["spec"]["ports"][0]["nodePort"] = node_port
    return service


def server_service(meta: Meta, port: int, metrics: int | None = None) -> dict[str, Any]:
    """ClusterIP Service in front of the server, with the metrics proxy's port when it has one."""
    service = cluster_ip_service(meta, selector_labels(meta.labels), "http", port)
    if metrics is not None:
        service["spec"]["ports"].append(
            {"name": METRICS_PORT_NAME, "port": metrics, "targetPort": METRICS_PORT_NAME,
             "protocol": "TCP"}
        )  # fmt: skip
    return service


def cluster_ip_service(
    meta: Meta, selector: dict[str, str], port_name: str, port: int
) -> dict[str, Any]:
    """A ClusterIP Service of one named container port."""
    # The Deployment is already awaited until Ready; the Service need not wait again.
    no_await = {"pulumi.com/skipAwait": "true"}
    return {
        **object_head("v1", "Service", meta, no_await),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
            ],
        },
    }
