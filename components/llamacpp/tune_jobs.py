"""The bake-off as Kubernetes Jobs: one per candidate runtime, on the server's node, built from
the Deployment the stack renders with that runtime.

Each Job's pod is the server's pod (node selector, model volume read-only, devices, security,
the load-log wrapper), with llama-server as a native sidecar (an init container whose
`restartPolicy` is `Always`: it starts first, and the Job completes when the runner does) and
the runner (`components/payloads/tune_job.py`, in the stock Python image of the model check)
as the one container: it judges the server as a local candidate is judged and prints its result
line. The server's probes are left out: the runner's gate decides, and reports why. Pure
functions: the shipped files come in as text.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from components.k8s.metadata import Meta, config_map
from components.k8s.network_policies import isolating_policy
from components.k8s.pod_security import checkov_skips, image_skips, scratch_volume
from components.k8s.verify_job import client_container

TUNE_MOUNT = "/opt/llm-infra-tune"
"""Where the runner finds its modules, its settings and the expectations."""
RUNNER_FILE = "run_tune_job.py"
RUNNER_SOURCE = (
    '"""Runs components.payloads.tune_job from the modules shipped beside this file."""\n'
    "import os\nimport sys\n\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
    "from components.payloads.tune_job import main  # noqa: E402\n\n"
    "sys.exit(main())\n"
)
"""The runner's entry point (python -I ignores PYTHONPATH, so the path is set here)."""
EXPECT_FILE = "expect.json"
JOB_DEADLINE_S = 6 * 3600
"""A candidate's load, checks and every depth's figures (64k-token fills) in one Job."""
TUNE_COMPONENT = "tune"


def config_key(path: str) -> str:
    """A ConfigMap key for a shipped path (keys cannot hold `/`)."""
    return path.replace("/", "__")


def tune_config_map(meta: Meta, files: dict[str, str]) -> dict[str, Any]:
    """The runner's files, by their path under the mount (`components/payloads/verify.py`,
    `job-NAME.json`, `expect.json`, ...)."""
    data = {config_key(path): text for path, text in sorted(files.items())}
    return config_map(meta, data)


def _used_volumes(containers: list[dict[str, Any]]) -> set[str]:
    return {m["name"] for c in containers for m in c.get("volumeMounts", [])}


def tune_job(
    deployment: dict[str, Any],
    *,
    name: str,
    candidate: str,
    runner_image: str,
    config_map: str,
    run_as_user: int,
    api_key_secret: tuple[str, str] | None,
    modules: Sequence[str],
) -> dict[str, Any]:
    """The Job of one candidate from the Deployment the stack renders with its runtime;
    `modules` are the payload paths its ConfigMap holds (`runner_files`)."""
    meta = deployment["metadata"]
    pod = copy.deepcopy(deployment["spec"]["template"]["spec"])
    server = next(c for c in pod["containers"] if c["name"] == "llama-server")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        server.pop(probe, None)
    server["restartPolicy"] = "Always"
    args = server.get("args", [])
    port = args[args.index("--port") + 1] if "--port" in args else "8080"
    log = args[args.index("--log-file") + 1] if "--log-file" in args else None
    if log is None:
        raise ValueError("the server renders no --log-file: the gate needs its load log")
    log_mount = next(
        m
        for m in server.get("volumeMounts", [])
        if log.startswith(m["mountPath"].rstrip("/") + "/")
    )
    command = [
        "python3", "-I", f"{TUNE_MOUNT}/{RUNNER_FILE}",
        "--settings", f"{TUNE_MOUNT}/job-{candidate}.json",
        "--url", f"http://127.0.0.1:{port}", "--log", log,
    ]  # fmt: skip
    runner = client_container(
        "tune",
        runner_image,
        command,
        env=[{"name": "PYTHONUNBUFFERED", "value": "1"}],
        api_key_secret=api_key_secret,
        run_as_user=run_as_user,
        resources={
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1000m", "memory": "512Mi"},
        },
        mounts=[
            {"name": "tune", "mountPath": TUNE_MOUNT, "readOnly": True},
            {**log_mount, "readOnly": True},
        ],
    )
    pod["initContainers"] = [*pod.get("initContainers", []), server]
    pod["containers"] = [runner]
    pod["restartPolicy"] = "Never"
    pod["automountServiceAccountToken"] = False
    used = _used_volumes(pod["initContainers"]) | {"scratch"}
    pod["volumes"] = [v for v in pod.get("volumes", []) if v["name"] in used]
    if not any(v["name"] == "scratch" for v in pod["volumes"]):
        pod["volumes"].append(scratch_volume())
    pod["volumes"].append(
        {
            "name": "tune",
            "configMap": {
                "name": config_map,
                "defaultMode": 0o444,
                "items": [
                    {"key": config_key(path), "path": path}
                    for path in sorted(
                        [*modules, RUNNER_FILE, EXPECT_FILE, f"job-{candidate}.json"]
                    )
                ],
            },
        }
    )
    labels = {
        **{k: v for k, v in meta.get("labels", {}).items() if k != "app.kubernetes.io/component"},
        "app.kubernetes.io/component": TUNE_COMPONENT,
    }
    # The server's checkov answers and the runner image's, one annotation per check.
    skips = [
        tuple(value.split("=", 1))
        for key, value in meta.get("annotations", {}).items()
        if key.startswith("checkov.io/skip")
    ]
    annotations = {
        **{k: v for k, v in meta.get("annotations", {}).items() if k.startswith("llm-infra/")},
        **checkov_skips([(c, r) for c, r in skips] + image_skips(runner_image)),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": meta["namespace"], "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": JOB_DEADLINE_S,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }  # fmt: skip


def runner_files(
    modules: dict[str, str], expectations: str, settings: dict[str, dict[str, Any]]
) -> dict[str, str]:
    """Every file the runners read, by path: the payload modules (path → source), the entry
    point, the expectations and each candidate's `job-NAME.json`."""
    files = {**modules, RUNNER_FILE: RUNNER_SOURCE, EXPECT_FILE: expectations}
    for candidate, doc in settings.items():
        files[f"job-{candidate}.json"] = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    return files


def tune_network_policy(meta: Meta) -> dict[str, Any]:
    """No traffic in or out of the bake-off's pods: the runner reaches its server on the pod's
    loopback, which no NetworkPolicy governs, and nothing else needs the network."""
    tune_pods = {
        "app.kubernetes.io/instance": meta.labels["app.kubernetes.io/instance"],
        "app.kubernetes.io/component": TUNE_COMPONENT,
    }
    return isolating_policy(meta, tune_pods)
