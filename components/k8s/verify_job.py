"""The optional post-deploy check: a Job that runs `verify.py` against the server's Service."""

import hashlib
from typing import Any

from components.k8s.metadata import config_map, object_head
from components.k8s.pod_security import (
    SCRATCH_MOUNT,
    checkov_skips,
    image_skips,
    restricted_container,
    restricted_pod,
    scratch_mount,
    scratch_volume,
)
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
    name: str,
    namespace: str,
    labels: dict[str, str],
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
    return config_map(name, namespace, labels, data, immutable=True)


def verify_job(
    name: str,
    namespace: str,
    labels: dict[str, str],
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
    env: list[dict[str, Any]] = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": SCRATCH_MOUNT},
    ]
    if api_key_secret is not None:
        secret, key = api_key_secret
        env.append(
            {
                "name": "LLM_INFRA_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": key}},
            }
        )
    pod_labels = {**labels, **verify_pod_labels(labels["app.kubernetes.io/instance"])}
    return {
        **object_head(
            "batch/v1", "Job", name, namespace, labels, checkov_skips(image_skips(image))
        ),
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": 900,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": restricted_pod(),
                    "containers": [
                        {
                            "name": "verify",
                            "image": image,
                            "command": [
                                "python3",
                                f"{VERIFY_MOUNT}/verify.py",
                                url,
                                "--expect",
                                f"{VERIFY_MOUNT}/expect.json",
                                *(
                                    ["--props", f"{VERIFY_MOUNT}/{EXPECTED_PROPS_FILE}"]
                                    if check_props
                                    else []
                                ),
                                *floor_args(min_decode_tps),
                            ],
                            "env": env,
                            "securityContext": restricted_container(run_as_user),
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"cpu": "500m", "memory": "256Mi"},
                            },
                            "volumeMounts": [
                                {"name": "verify", "mountPath": VERIFY_MOUNT, "readOnly": True},
                                scratch_mount(),
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "verify", "configMap": {"name": config_map, "defaultMode": 0o444}},
                        scratch_volume(),
                    ],
                },
            },
        },
    }
