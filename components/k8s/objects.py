"""One Kubernetes object of a component, as its pure builder describes it.

A component's builder returns the list of its objects (`server_objects`, `worker_objects`,
`store_objects`); `children.kube_resources` makes each one a resource, in one loop, and nothing
edits an object once it is built. An object's manifest is a function of the known values of
the component inputs it reads (the namespace, the model volume), because those may be outputs of
other resources: the resource waits for, and depends on, exactly those.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KubeObject:
    """A Kubernetes object: its Pulumi resource, its manifest, and the options it needs."""

    resource: str
    """The Pulumi resource name (`{component}-{suffix}`)."""
    kind: str
    """The object's kind, which picks the resource type (a CRD's kind: a CustomResource)."""
    manifest: Callable[..., dict[str, Any]]
    """The object, from the known values of `reads`, in their order."""
    reads: tuple[str, ...] = ("namespace",)
    """What the manifest is made of: component inputs (each may be an output), or the resource
    name of an object earlier in the list, for its manifest."""
    fields: tuple[str, ...] = ("metadata", "spec")
    """The manifest's top-level fields the resource is given."""
    api_version: str | None = None
    """A custom resource's apiVersion (the resource type of a built-in kind implies it)."""
    constants: tuple[tuple[str, Any], ...] = ()
    """Resource arguments given as they are, made of no input (a Secret's `type`)."""
    secret_data: tuple[tuple[str, str], ...] = ()
    """A Secret's `stringData`: (key, the input holding its value), always kept secret."""
    after: tuple[str, ...] = ()
    """Resource names of objects earlier in the list that this one waits for."""
    inherit: bool = True
    """Also wait for the component's own dependsOn (Pulumi does not pass it to children)."""
    timeout: str | None = None
    """Create and update timeout (`2460s`), for a resource awaited longer than the default."""
    delete_before_replace: bool = False
    """On replace, delete the old object before the new one exists."""
    replace_on_changes: tuple[str, ...] = ()
    """Property paths whose change replaces the object instead of updating it."""
    protect: bool = False
    """Pulumi refuses to delete it (the model volume)."""


def named(objects: list[KubeObject]) -> dict[str, KubeObject]:
    """The objects by resource name."""
    return {obj.resource: obj for obj in objects}
