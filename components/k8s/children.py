"""What every component does with its inputs and for its children.

Inputs may reach a component as plain values (a Python program), as outputs of other resources,
or over Pulumi's provider protocol, where every number is a double and any value may be unknown
at preview. The helpers here make the builders see one thing: typed, known values.
"""

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.objects import KubeObject

T = TypeVar("T")


def inherited_dependencies(opts: pulumi.ResourceOptions | None) -> list[pulumi.Resource]:
    """The component's own dependsOn, for its children: Pulumi does not pass it down."""
    depends = opts.depends_on if opts else None
    if depends is None:
        return []
    if isinstance(depends, pulumi.Resource):
        return [depends]
    return list(depends)  # type: ignore[arg-type]


def manifest_args(manifest: pulumi.Output[dict[str, Any]], *fields: str) -> dict[str, Any]:
    """Resource arguments from a manifest built from inputs: each top-level field an output.

    The builders take known values, so a manifest that needs an input (a namespace, a claim
    name) is built in an apply; the resource then waits for, and depends on, those inputs.
    """

    def field_of(key: str) -> pulumi.Output[Any]:
        return manifest.apply(lambda built: built[key])

    return {field: field_of(field) for field in fields}


def after(resource: pulumi.Resource, value: T) -> pulumi.Output[T]:
    """`value` as an output of `resource`: whoever uses it depends on (and waits for) it."""
    return resource.urn.apply(lambda _: value)


RESOURCE_TYPES: dict[str, Any] = {
    "ConfigMap": k8s.core.v1.ConfigMap,
    "Deployment": k8s.apps.v1.Deployment,
    "Job": k8s.batch.v1.Job,
    "NetworkPolicy": k8s.networking.v1.NetworkPolicy,
    "PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
    "Secret": k8s.core.v1.Secret,
    "Service": k8s.core.v1.Service,
}
"""The resource type of each built-in kind a component creates."""


def kube_resources(
    objects: Sequence[KubeObject],
    inputs: Mapping[str, pulumi.Input[Any]],
    parent: pulumi.Resource,
    inherited: Sequence[pulumi.Resource],
    waits_for: Mapping[str, Sequence[pulumi.Resource]] | None = None,
) -> dict[str, Any]:
    """The objects as resources, in their order, by resource name: each one's manifest made from
    what it reads, `inputs` or the manifest of an object before it. `waits_for`: resources
    outside the component an object waits for. Each is of its kind's resource type."""
    made: dict[str, Any] = {}
    readable: dict[str, pulumi.Input[Any]] = dict(inputs)
    for obj in objects:
        depends_on = [
            *(inherited if obj.inherit else ()),
            *(made[resource] for resource in obj.after),
            *(waits_for or {}).get(obj.resource, ()),
        ]
        manifest = _manifest(obj, [readable[key] for key in obj.reads])
        readable[obj.resource] = manifest
        made[obj.resource] = _resource(obj, manifest, inputs, _options(obj, parent, depends_on))
    return made


def _manifest(obj: KubeObject, reads: list[pulumi.Input[Any]]) -> pulumi.Output[dict[str, Any]]:
    """The object's manifest, once the inputs it reads are known."""
    known = pulumi.Output.all(*(pulumi.Output.from_input(value) for value in reads))
    return known.apply(lambda values: obj.manifest(*values))


def _options(
    obj: KubeObject, parent: pulumi.Resource, depends_on: list[pulumi.Resource]
) -> pulumi.ResourceOptions:
    timeouts = None
    if obj.timeout is not None:
        timeouts = pulumi.CustomTimeouts(create=obj.timeout, update=obj.timeout)
    return pulumi.ResourceOptions(
        parent=parent,
        depends_on=depends_on,
        custom_timeouts=timeouts,
        delete_before_replace=obj.delete_before_replace or None,
        replace_on_changes=list(obj.replace_on_changes) or None,
        protect=obj.protect or None,
    )


def _resource(
    obj: KubeObject,
    manifest: pulumi.Output[dict[str, Any]],
    inputs: Mapping[str, pulumi.Input[Any]],
    opts: pulumi.ResourceOptions,
) -> pulumi.CustomResource:
    fields = {**manifest_args(manifest, *obj.fields), **dict(obj.constants)}
    if obj.secret_data:
        fields["string_data"] = {
            key: pulumi.Output.secret(inputs[source]) for key, source in obj.secret_data
        }
    if obj.kind in RESOURCE_TYPES:
        resource: pulumi.CustomResource = RESOURCE_TYPES[obj.kind](
            obj.resource, **fields, opts=opts
        )
        return resource
    if obj.api_version is None:
        raise ValueError(f"{obj.resource}: a {obj.kind} needs its apiVersion")
    # A CRD's kind and apiVersion are plain strings: they make the resource's type token.
    return k8s.apiextensions.CustomResource(
        obj.resource, api_version=obj.api_version, kind=obj.kind, **fields, opts=opts
    )
