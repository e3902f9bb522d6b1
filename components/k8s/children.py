"""What every component does with its inputs and for its children.

Inputs may reach a component as plain values (a Python program), as outputs of other resources,
or over Pulumi's provider protocol, where every number is a double and any value may be unknown
at preview. The helpers here make the builders see one thing: typed, known values.
"""

import types
from collections.abc import Awaitable, Mapping, Sequence
from typing import (
    Annotated,
    Any,
    ForwardRef,
    NotRequired,
    Required,
    TypeVar,
    Union,
    cast,
    get_args,
    get_origin,
)

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


def with_integers(value: T, annotation: Any, where: str = "args") -> T:
    """`value` with every number its annotation types as `int` made an int.

    The provider protocol carries numbers as doubles and the SDK's component provider hands them
    on as floats (`8080.0`); a builder must see `8080` whichever way the value came. A float
    that is not a whole number where an int is declared is an error naming the field.
    """
    if isinstance(value, pulumi.Output):
        return cast(T, value.apply(lambda resolved: with_integers(resolved, annotation, where)))
    annotation = _value_type(annotation)
    if annotation is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{where}: {value!r} is not a whole number")
            return cast(T, int(value))
        return value
    fields = getattr(annotation, "__annotations__", None)
    if isinstance(value, dict):
        if fields is not None and hasattr(annotation, "__required_keys__"):
            return cast(
                T,
                {
                    key: with_integers(item, fields[key], f"{where}.{key}")
                    if key in fields
                    else item
                    for key, item in value.items()
                },
            )
        if get_origin(annotation) is dict:
            item_type = get_args(annotation)[1]
            return cast(
                T, {k: with_integers(v, item_type, f"{where}.{k}") for k, v in value.items()}
            )
    if isinstance(value, list) and get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        return cast(T, [with_integers(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)])
    return value


def _value_type(annotation: Any) -> Any:
    """The type of a known value under NotRequired, `| None` and `pulumi.Input[...]`."""
    while get_origin(annotation) in (NotRequired, Required, Annotated):
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        known = [
            member
            for member in get_args(annotation)
            if member is not type(None)
            and not isinstance(member, ForwardRef)
            and get_origin(member) not in (Awaitable, pulumi.Output)
        ]
        return _value_type(known[0]) if len(known) == 1 else Any
    return annotation


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
