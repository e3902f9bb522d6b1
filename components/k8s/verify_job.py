"""The optional post-deploy check: a Job that runs `verify.py` against the server's Service."""

import hashlib
from typing import Any

from components.k8s import pod_security
from components.k8s.metadata import Meta, config_map, object_head
from components.payloads import EXPECTED_PROPS_FILE, HTTP_POLICY_FILE, PROPS_FILE, VERIFY_MOUNT
from components.payloads.props import props_text


def floor_args(min_decode_tps: float | None) -> list[str]:
    """verify.py's decode-speed floor flag, when one is set."""
    return [] if min_decode_tps is None else ["--min-decode-tps", repr(float(min_decode_tps))]


def verify_pod_labels(name: str) -> dict[str, str]:
    """Labels of the verify pod; the server's NetworkPolicy admits them."""
    return {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "verify"}


def verify_digest(
    expectations: str,
    verify_source: str,
    deployment: dict[str, Any],
    expected_props: dict[str, Any] | None = None,
) -> str:
    """A new Job whenever the expectations, the script, the expected server properties or the
    Deployment change."""
    props = "" if expected_props is None else props_text(expected_props)
    text = expectations + verify_source + props + repr(deployment)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def verify_config_map(
    meta: Meta,
    expectations: str,
    verify_source: str,
    policy_source: str = "",
    *,
    props_source: str = "",
    expected_props: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The script, the modules it imports (HTTP policy, server-properties check), the recorded
    expectations and the server properties the render expects, for a stock Python image."""
    data = {
        "verify.py": verify_source,
        **({HTTP_POLICY_FILE: policy_source} if policy_source else {}),
        **({PROPS_FILE: props_source} if props_source else {}),
        "expect.json": expectations,
        **({EXPECTED_PROPS_FILE: props_text(expected_props)} if expected_props is not None else {}),
    }
    return config_map(meta, data, immutable=True)


def client_container(
    name: str,
    image: str,
    command: list[str],
    *,
    env: list[dict[str, Any]],
    api_key_secret: tuple[str, str] | None,
    run_as_user: int,
    resources: dict[str, Any],
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """A container of a stock Python image that checks a server over HTTP: `env`, then the
    server's API key (when it has one) from its Secret as LLM_INFRA_API_KEY; `mounts`, then the
    scratch volume."""
    if api_key_secret is not None:
        secret, key = api_key_secret
        key_ref = {"secretKeyRef": {"name": secret, "key": key}}
        env = [*env, {"name": "LLM_INFRA_API_KEY", "valueFrom": key_ref}]
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": env,
        "securityContext": pod_security.restricted_container(run_as_user),
        "resources": resources,
        "volumeMounts": [*mounts, pod_security.scratch_mount()],
    }


def verify_job(
    meta: Meta,
    *,
    image: str,
    config_map: str,
    url: str,
    api_key_secret: tuple[str, str] | None,
    run_as_user: int,
    min_decode_tps: float | None = None,
    check_props: bool = False,
) -> dict[str, Any]:
    """A Job that fails when the server's answers differ from the recorded reference, or (with
    `check_props`) when the server reports other properties than the ConfigMap's props.json."""
    command = [
        "python3",
        f"{VERIFY_MOUNT}/verify.py",
        url,
        "--expect",
        f"{VERIFY_MOUNT}/expect.json",
        *(["--props", f"{VERIFY_MOUNT}/{EXPECTED_PROPS_FILE}"] if check_props else []),
        *floor_args(min_decode_tps),
    ]
    container = client_container(
        "verify",
        image,
        command,
        env=[
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HOME", "value": pod_security.SCRATCH_MOUNT},
        ],
        api_key_secret=api_key_secret,
        run_as_user=run_as_user,
        resources={
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        mounts=[{"name": "verify", "mountPath": VERIFY_MOUNT, "readOnly": True}],
    )
    pod_labels = {**meta.labels, **verify_pod_labels(meta.labels["app.kubernetes.io/instance"])}
    skips = pod_security.checkov_skips(pod_security.image_skips(image))
    return {
        **object_head("batch/v1", "Job", meta, skips),
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": 900,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security.restricted_pod(),
                    "containers": [container],
                    "volumes": [
                        {"name": "verify", "configMap": {"name": config_map, "defaultMode": 0o444}},
                        pod_security.scratch_volume(),
                    ],
                },
            },
        },
    }
