"""How the policy rules read a rendered resource: its kind, pod spec, containers, and the files
a CopyToRemote places on a host (a compose file's services among them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

Resource = Mapping[str, Any]
Files = Mapping[str, str]

_WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod", "CronJob"}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 0.000001}


def kind_of(resource: Resource) -> str:
    inputs = resource.get("inputs") or {}
    kind = inputs.get("kind") if isinstance(inputs, Mapping) else None
    if isinstance(kind, str):
        return kind
    # `kubernetes:apps/v1:Deployment` → Deployment (inputs may omit kind under a preview).
    rtype = str(resource.get("type", ""))
    return rtype.rsplit(":", 1)[-1] if rtype.startswith("kubernetes:") else ""


def pod_spec(resource: Resource) -> Mapping[str, Any] | None:
    """The pod spec of a Kubernetes workload, or None for anything else."""
    if not str(resource.get("type", "")).startswith("kubernetes:"):
        return None
    kind = kind_of(resource)
    if kind not in _WORKLOAD_KINDS:
        return None
    spec: Any = (resource.get("inputs") or {}).get("spec") or {}
    if kind == "Pod":
        return spec if isinstance(spec, Mapping) else None
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = (spec.get("template") or {}).get("spec")
    return template if isinstance(template, Mapping) else None


def containers(resource: Resource) -> list[Mapping[str, Any]]:
    """Containers and init containers of a Kubernetes workload (empty for other resources)."""
    spec = pod_spec(resource)
    if spec is None:
        return []
    found = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return [c for c in found if isinstance(c, Mapping)]


def remote_file(resource: Resource, files: Files | None) -> tuple[str, str] | None:
    """(remote path, text) of a file a CopyToRemote places on a host, when the text is known."""
    if resource.get("type") != "command:remote:CopyToRemote":
        return None
    remote_path = str((resource.get("inputs") or {}).get("remotePath", ""))
    text = (files or {}).get(remote_path)
    return (remote_path, text) if text is not None else None


def compose_services(resource: Resource, files: Files | None) -> dict[str, Mapping[str, Any]]:
    """The services of a compose file copied by this resource (empty if it copies none)."""
    found = remote_file(resource, files)
    if found is None or not re.search(r"(^|/)(docker-)?compose\.ya?ml$", found[0]):
        return {}
    # libyaml's parser where PyYAML has it (the same documents, several times faster).
    document = yaml.load(found[1], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    services = document.get("services") if isinstance(document, dict) else None
    if not isinstance(services, dict):
        return {}
    return {str(k): v for k, v in services.items() if isinstance(v, Mapping)}


def duration_seconds(value: object) -> float:
    """A compose/Go duration (`3600s`, `1h30m`, `90`) in seconds; ValueError if malformed."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
