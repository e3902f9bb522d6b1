"""GgufModelStore: a protected PVC for GGUF models and the Job that fetches a locked shard set."""

import hashlib
import json
import urllib.parse
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.fetcher import lock_digest
from components.network_policies import egress_policy
from components.pod_security import (
    SCRATCH_MOUNT,
    checkov_skips,
    image_skips,
    restricted_container,
    restricted_pod,
    scratch_mount,
    scratch_volume,
)

TYPE_TOKEN = "llm-infra:index:GgufModelStore"
MODELS_MOUNT = "/models"
FETCHER_MOUNT = "/opt/llm-infra"
FETCHER_SOURCE = Path(__file__).with_name("fetcher.py")
HF_TOKEN_KEY = "token"
# Above 10000: no clash with the node's own users (checkov CKV_K8S_40).
DEFAULT_UID = 10001


class ModelFile(TypedDict):
    """One file of the model as it is in the hub repo."""

    path: str
    """Path inside the repo, e.g. `UD-IQ1_M/Model-UD-IQ1_M-00001-of-00003.gguf`."""
    name: str
    """File name on the volume (the server's `-m` points at the first shard's name)."""
    size: NotRequired[int | None]
    """Size in bytes, when known (from the lock)."""
    sha256: NotRequired[str | None]
    """sha256 of the content (the LFS oid), when known (from the lock)."""


class ModelVolume(TypedDict):
    """Where a server finds its model: what a GgufModelStore provides."""

    claim_name: str
    """The models PVC."""
    fetcher_config_map: str
    """ConfigMap with the fetcher and lock, for the server's init check."""
    check_image: str
    """Image that runs the init check (the store's fetch image)."""
    run_as_user: int
    """Non-root uid of the init check."""


class GgufModelStoreArgs(TypedDict):
    """Inputs of GgufModelStore."""

    namespace: str
    """Namespace of the PVC, ConfigMap, Secret and Job."""
    repo: str
    """Hugging Face repo id, e.g. `unsloth/DeepSeek-V4-Flash-0731-GGUF`."""
    revision: str
    """Branch, tag or commit sha to fetch."""
    files: list[ModelFile]
    """The files of the model, first shard first."""
    volume_size: str
    """PVC size as a Kubernetes quantity (`120Gi`): the model plus room for the next one."""
    storage_class: str
    """Storage class of the PVC (k3s: `local-path`, bound to one node)."""
    node_selector: dict[str, str]
    """Where the Job runs: the server's node, since a local-path volume is node-bound."""
    fetch_image: str
    """A pinned stock Python image that runs the fetcher (standard library only)."""
    retired_patterns: NotRequired[list[str]]
    """Glob patterns of retired model files to delete (never a file of this model)."""
    parallel_downloads: NotRequired[int]
    """Files downloaded at once (default 3)."""
    fetch_timeout_seconds: NotRequired[int]
    """Deadline of the fetch Job (default 12 h: 87 GiB over a slow home link)."""
    hf_endpoint: NotRequired[str | None]
    """Hub endpoint (a mirror); default huggingface.co."""
    hf_token: NotRequired[pulumi.Input[str] | None]
    """HF token for gated or private repos; stored as a Kubernetes Secret, never in argv or env."""
    network_policy: NotRequired[bool]
    """Restrict the fetch pod to DNS and the hub's port (default True)."""
    run_as_user: NotRequired[int]
    """Non-root uid of the fetch and check containers (default 10001)."""


class GgufModelStore(pulumi.ComponentResource):
    """A PVC that holds GGUF models, and a Job that fetches exactly the locked files onto it."""

    claim_name: pulumi.Output[str]
    """Name of the model PVC."""
    fetcher_config_map: pulumi.Output[str]
    """Name of the ConfigMap with the fetcher and the lock (mounted by the server's init check)."""
    lock_digest: pulumi.Output[str]
    """sha256 of the lock the Job fetched; the completion marker is named after it."""
    model_path: pulumi.Output[str]
    """Path of the first shard inside a pod that mounts the volume at /models."""

    def __init__(
        self, name: str, args: GgufModelStoreArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        namespace = args["namespace"]
        labels = store_labels(name)
        lock = model_lock(args["repo"], args["revision"], args["files"])
        digest = lock_digest(lock)
        names = store_names(name, content_digest(lock))
        inherited = inherited_dependencies(opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=inherited)

        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            **without_kind(
                model_pvc(
                    names["pvc"], namespace, labels, args["volume_size"], args["storage_class"]
                )
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=inherited, protect=True),
        )
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-fetcher",
            **without_kind(fetcher_config_map(names["config_map"], namespace, labels, lock)),
            opts=child,
        )
        token_secret = None
        hf_token = args.get("hf_token")
        if hf_token is not None:
            token_secret = names["token_secret"]
            self.token_secret = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata={"name": token_secret, "namespace": namespace, "labels": labels},
                type="Opaque",
                string_data={HF_TOKEN_KEY: pulumi.Output.secret(hf_token)},
                opts=child,
            )
        timeout = args.get("fetch_timeout_seconds", 12 * 3600)
        job = fetch_job(
            names["job"],
            namespace,
            labels,
            image=args["fetch_image"],
            claim_name=names["pvc"],
            config_map=names["config_map"],
            node_selector=args["node_selector"],
            retired=args.get("retired_patterns", []),
            parallel=args.get("parallel_downloads", 3),
            timeout_seconds=timeout,
            hf_endpoint=args.get("hf_endpoint"),
            token_secret=token_secret,
            run_as_user=args.get("run_as_user", DEFAULT_UID),
        )
        self.fetch_job = k8s.batch.v1.Job(
            f"{name}-fetch",
            **without_kind(job),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*inherited, self.pvc, self.config_map],
                # The Job is awaited until Complete: give the provider the Job's own deadline.
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{timeout + 600}s", update=f"{timeout + 600}s"
                ),
                delete_before_replace=True,
            ),
        )
        self.model_volume: ModelVolume = {
            "claim_name": names["pvc"],
            "fetcher_config_map": names["config_map"],
            "check_image": args["fetch_image"],
            "run_as_user": args.get("run_as_user", DEFAULT_UID),
        }
        """The volume, its init check and image, as LlamaCppVulkanServerArgs.model takes them."""
        if args.get("network_policy", True):
            self.fetch_policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-fetch-egress",
                **without_kind(
                    egress_policy(
                        f"{name}-fetch-egress",
                        namespace,
                        labels,
                        fetch_pod_labels(name),
                        [hub_port(args.get("hf_endpoint"))],
                    )
                ),
                opts=child,
            )
        self.claim_name = pulumi.Output.from_input(names["pvc"])
        self.fetcher_config_map = pulumi.Output.from_input(names["config_map"])
        self.lock_digest = pulumi.Output.from_input(digest)
        self.model_path = pulumi.Output.from_input(f"{MODELS_MOUNT}/{args['files'][0]['name']}")
        self.register_outputs(
            {
                "claim_name": self.claim_name,
                "fetcher_config_map": self.fetcher_config_map,
                "lock_digest": self.lock_digest,
                "model_path": self.model_path,
            }
        )


def inherited_dependencies(opts: pulumi.ResourceOptions | None) -> list[pulumi.Resource]:
    """The component's own dependsOn, for its children: Pulumi does not pass it down."""
    depends = opts.depends_on if opts else None
    if depends is None:
        return []
    if isinstance(depends, pulumi.Resource):
        return [depends]
    return list(depends)  # type: ignore[arg-type]


def without_kind(manifest: dict[str, Any]) -> dict[str, Any]:
    """Resource kwargs from a manifest: the Pulumi type already fixes apiVersion and kind."""
    return {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}


def store_labels(name: str) -> dict[str, str]:
    """Labels shared by the store's objects."""
    return {
        "app.kubernetes.io/name": "model-store",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "llm-infra",
    }


def content_digest(lock: dict[str, Any]) -> str:
    """sha256 of what the Job runs (lock and fetcher): a change makes a new ConfigMap and Job."""
    return hashlib.sha256((lock_digest(lock) + FETCHER_SOURCE.read_text()).encode()).hexdigest()


def fetch_pod_labels(name: str) -> dict[str, str]:
    """Labels of the fetch pod (its NetworkPolicy selects them)."""
    return {**store_labels(name), "app.kubernetes.io/component": "fetch"}


def hub_port(endpoint: str | None) -> int:
    """TCP port of the hub endpoint (443 for huggingface.co)."""
    parsed = urllib.parse.urlsplit(endpoint or "https://huggingface.co")
    return parsed.port or (80 if parsed.scheme == "http" else 443)


def store_names(name: str, digest: str) -> dict[str, str]:
    """Object names; the content digest in the Job and ConfigMap names makes a change a new Job."""
    return {
        "pvc": name,
        "config_map": f"{name}-fetcher-{digest[:8]}",
        "job": f"{name}-fetch-{digest[:8]}",
        "token_secret": f"{name}-hf-token",
    }


def model_lock(repo: str, revision: str, files: list[ModelFile]) -> dict[str, Any]:
    """The lock document (version 1) that the fetcher reads."""
    return {
        "version": 1,
        "repo": repo,
        "revision": revision,
        "files": [
            {
                "path": f["path"],
                "name": f["name"],
                "size": f.get("size"),
                "sha256": f.get("sha256"),
            }
            for f in files
        ],
    }


def fetcher_config_map(
    name: str, namespace: str, labels: dict[str, str], lock: dict[str, Any]
) -> dict[str, Any]:
    """The fetcher's source and the lock, delivered to a stock Python image without pip."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {
            "fetcher.py": FETCHER_SOURCE.read_text(),
            "lock.json": json.dumps(lock, indent=2, sort_keys=True) + "\n",
        },
        "immutable": True,
    }


def model_pvc(
    name: str, namespace: str, labels: dict[str, str], size: str, storage_class: str
) -> dict[str, Any]:
    """The model volume: one node, read-write by the Job, read-only by the server."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }


def model_volumes(claim_name: str, config_map: str, read_only: bool) -> list[dict[str, Any]]:
    """Pod volumes for the models PVC and the fetcher ConfigMap."""
    return [
        {
            "name": "models",
            "persistentVolumeClaim": {"claimName": claim_name, "readOnly": read_only},
        },
        {"name": "fetcher", "configMap": {"name": config_map, "defaultMode": 0o444}},
    ]


def fetcher_command(action: str, extra: list[str] | None = None) -> list[str]:
    """argv of the fetcher inside a pod that mounts the ConfigMap and the models volume."""
    return [
        "python3",
        f"{FETCHER_MOUNT}/fetcher.py",
        action,
        "--lock",
        f"{FETCHER_MOUNT}/lock.json",
        "--dest",
        MODELS_MOUNT,
        *(extra or []),
    ]


def _mounts(read_only: bool) -> list[dict[str, Any]]:
    return [
        {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": read_only},
        {"name": "fetcher", "mountPath": FETCHER_MOUNT, "readOnly": True},
        scratch_mount(),
    ]


def model_check_container(image: str, run_as_user: int = DEFAULT_UID) -> dict[str, Any]:
    """Init container that refuses to start the server on an incomplete shard set (no download)."""
    return {
        "name": "model-check",
        "image": image,
        "command": fetcher_command("check"),
        "securityContext": restricted_container(run_as_user),
        "volumeMounts": _mounts(read_only=True),
        "resources": {
            "requests": {"cpu": "50m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
    }


def fetch_job(
    name: str,
    namespace: str,
    labels: dict[str, str],
    *,
    image: str,
    claim_name: str,
    config_map: str,
    node_selector: dict[str, str],
    retired: list[str],
    parallel: int,
    timeout_seconds: int,
    hf_endpoint: str | None,
    token_secret: str | None,
    run_as_user: int = DEFAULT_UID,
) -> dict[str, Any]:
    """The fetch Job: resumable across pod restarts since partial files stay on the volume."""
    extra = ["--parallel", str(parallel)]
    for pattern in retired:
        extra += ["--retire", pattern]
    env: list[dict[str, Any]] = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": SCRATCH_MOUNT},
    ]
    if hf_endpoint:
        env.append({"name": "HF_ENDPOINT", "value": hf_endpoint})
    if token_secret:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token_secret, "key": HF_TOKEN_KEY}},
            }
        )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": checkov_skips(image_skips(image)),
        },
        "spec": {
            "backoffLimit": 6,
            "activeDeadlineSeconds": timeout_seconds,
            "template": {
                "metadata": {"labels": {**labels, "app.kubernetes.io/component": "fetch"}},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "nodeSelector": node_selector,
                    "automountServiceAccountToken": False,
                    # fsGroup makes a fresh volume writable for the non-root fetcher.
                    "securityContext": {
                        **restricted_pod(),
                        "fsGroup": run_as_user,
                        "fsGroupChangePolicy": "OnRootMismatch",
                    },
                    "containers": [
                        {
                            "name": "fetch",
                            "image": image,
                            "command": fetcher_command("fetch", extra),
                            "env": env,
                            "securityContext": restricted_container(run_as_user),
                            "volumeMounts": _mounts(read_only=False),
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "256Mi"},
                                "limits": {"cpu": "2000m", "memory": "1Gi"},
                            },
                        }
                    ],
                    "volumes": [
                        *model_volumes(claim_name, config_map, read_only=False),
                        scratch_volume(),
                    ],
                },
            },
        },
    }
