"""Pure builders of GgufModelStore: the PVC, the fetcher ConfigMap, the fetch Job, the check."""

import hashlib
import json
import urllib.parse
from typing import Any

from components.k8s.metadata import Meta, app_labels, config_map, object_head
from components.k8s.pod_security import (
    DEFAULT_UID,
    SCRATCH_MOUNT,
    checkov_skips,
    image_skips,
    restricted_container,
    restricted_pod,
    scratch_mount,
    scratch_volume,
)
from components.model_store.inputs import DRAFT_DIR, MODELS_MOUNT
from components.payloads import (
    DRAFT_LOCK_FILE,
    FETCHER_FILE,
    FETCHER_MOUNT,
    HTTP_POLICY_FILE,
    LOCK_FILE,
)

HF_TOKEN_KEY = "token"


def store_labels(name: str) -> dict[str, str]:
    """Labels shared by the store's objects."""
    return app_labels("model-store", name)


DRAFT_PATH = f"{MODELS_MOUNT}/{DRAFT_DIR}"
"""Where a pod finds the speculative draft's files."""


def content_digest(lock_digest: str, fetcher_source: str, draft_digest: str | None = None) -> str:
    """sha256 of what the Job runs (the locks, by their digests, and the fetcher): a change
    makes a new ConfigMap and Job."""
    draft = "" if draft_digest is None else "draft:" + draft_digest
    return hashlib.sha256((lock_digest + draft + fetcher_source).encode()).hexdigest()


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


def fetch_job_pattern(name: str) -> str:
    """A regex of every fetch Job name `store_names` gives (any content digest)."""
    return f"{name}-fetch-[0-9a-f]{{8}}"


def fetcher_config_map(
    meta: Meta,
    lock: dict[str, Any],
    fetcher_source: str,
    policy_source: str = "",
    draft_lock: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fetcher's source and the lock (and a speculative draft's), delivered to a stock
    Python image without pip."""
    data = {
        FETCHER_FILE: fetcher_source,
        **({HTTP_POLICY_FILE: policy_source} if policy_source else {}),
        LOCK_FILE: json.dumps(lock, indent=2, sort_keys=True) + "\n",
    }
    if draft_lock is not None:
        data[DRAFT_LOCK_FILE] = json.dumps(draft_lock, indent=2, sort_keys=True) + "\n"
    return config_map(meta, data, immutable=True)


def model_pvc(meta: Meta, size: str, storage_class: str) -> dict[str, Any]:
    """The model volume: one node, read-write by the Job, read-only by the server."""
    return {
        **object_head("v1", "PersistentVolumeClaim", meta),
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


def fetcher_command(action: str, extra: list[str] | None = None, draft: bool = False) -> list[str]:
    """argv of the fetcher inside a pod that mounts the ConfigMap and the models volume (with
    `draft`: the speculative draft's lock, into its folder)."""
    return [
        "python3",
        f"{FETCHER_MOUNT}/{FETCHER_FILE}",
        action,
        "--lock",
        f"{FETCHER_MOUNT}/{DRAFT_LOCK_FILE if draft else LOCK_FILE}",
        "--dest",
        DRAFT_PATH if draft else MODELS_MOUNT,
        *(extra or []),
    ]


def _mounts(read_only: bool) -> list[dict[str, Any]]:
    return [
        {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": read_only},
        {"name": "fetcher", "mountPath": FETCHER_MOUNT, "readOnly": True},
        scratch_mount(),
    ]


def model_check_container(
    image: str, run_as_user: int = DEFAULT_UID, draft: bool = False
) -> dict[str, Any]:
    """Init container that refuses to start the server on an incomplete shard set (no download);
    with `draft`, the speculative draft's."""
    return {
        "name": "draft-check" if draft else "model-check",
        "image": image,
        "command": fetcher_command("check", draft=draft),
        "securityContext": restricted_container(run_as_user),
        "volumeMounts": _mounts(read_only=True),
        "resources": {
            "requests": {"cpu": "50m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
    }


def fetch_job(
    meta: Meta,
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
    upgrade: str = "keep",
    allow_token_over_http: bool = False,
    draft: bool = False,
) -> dict[str, Any]:
    """The fetch Job: resumable across pod restarts since partial files stay on the volume.
    With `draft` the model is fetched first (an init container) and then the speculative
    draft into its folder, with the same options but the retired patterns (they are the
    model folder's)."""
    common = ["--parallel", str(parallel)]
    if allow_token_over_http:
        common.append("--allow-token-over-http")
    retire = [word for pattern in retired for word in ("--retire", pattern)]
    # keep is the fetcher's default: the old model stays until the new one is verified.
    upgrading = ["--upgrade", upgrade] if upgrade != "keep" else []
    uid = run_as_user
    model = fetcher_command("fetch", common + retire + upgrading)
    dft = fetcher_command("fetch", common + upgrading, draft=True)
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
        **object_head("batch/v1", "Job", meta, checkov_skips(image_skips(image))),
        "spec": {
            "backoffLimit": 6,
            "activeDeadlineSeconds": timeout_seconds,
            "template": {
                "metadata": {"labels": {**meta.labels, "app.kubernetes.io/component": "fetch"}},
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
                    **(
                        {
                            "initContainers": [fetch_container("fetch", image, model, env, uid)],
                            "containers": [fetch_container("fetch-draft", image, dft, env, uid)],
                        }
                        if draft
                        else {"containers": [fetch_container("fetch", image, model, env, uid)]}
                    ),
                    "volumes": [
                        *model_volumes(claim_name, config_map, read_only=False),
                        scratch_volume(),
                    ],
                },
            },
        },
    }


def fetch_container(
    name: str, image: str, command: list[str], env: list[dict[str, Any]], run_as_user: int
) -> dict[str, Any]:
    """A fetch Job's container running the fetcher `command`."""
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": env,
        "securityContext": restricted_container(run_as_user),
        "volumeMounts": _mounts(read_only=False),
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"cpu": "2000m", "memory": "1Gi"},
        },
    }
