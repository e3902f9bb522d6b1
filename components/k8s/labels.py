"""The labels every object this package creates carries, and each family's label set."""

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
