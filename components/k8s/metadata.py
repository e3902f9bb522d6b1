"""What every Kubernetes object this package creates starts with: its head and its labels."""

import dataclasses
from typing import Any

MANAGED_BY = {"app.kubernetes.io/managed-by": "llm-infra"}
"""Marks an object as this package's (`kubectl get -l app.kubernetes.io/managed-by=llm-infra`)."""


def app_labels(app: str, instance: str, part_of: str | None = None) -> dict[str, str]:
    """`app.kubernetes.io/` labels: name and instance first (the selector), then part-of, then
    managed-by."""
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": instance,
        **({"app.kubernetes.io/part-of": part_of} if part_of is not None else {}),
        **MANAGED_BY,
    }


@dataclasses.dataclass(frozen=True)
class Meta:
    """The name, namespace and labels of one object: what a builder is given for its head."""

    name: str
    namespace: str
    labels: dict[str, str]

    def named(self, name: str) -> "Meta":
        """Another object's: this name, the same namespace and labels."""
        return dataclasses.replace(self, name=name)

    def labelled(self, extra: dict[str, str]) -> "Meta":
        """With these labels added (over those of the same keys)."""
        return dataclasses.replace(self, labels={**self.labels, **extra})


def object_head(
    api_version: str, kind: str, meta: Meta, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """An object's `apiVersion`, `kind` and `metadata` (name, namespace, labels, and annotations
    when given)."""
    metadata: dict[str, Any] = {
        "name": meta.name,
        "namespace": meta.namespace,
        "labels": meta.labels,
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def config_map(meta: Meta, data: dict[str, str], immutable: bool = False) -> dict[str, Any]:
    """A ConfigMap of the given files; an immutable one is replaced, never edited in place."""
    head = object_head("v1", "ConfigMap", meta)
    return {**head, "data": data, **({"immutable": True} if immutable else {})}
