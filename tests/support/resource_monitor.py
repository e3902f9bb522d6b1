"""An in-process Pulumi engine for provider tests: the ResourceMonitor and Engine gRPC services.

A component provider's Construct registers the component and its children with the resource
monitor the request names, and logs to the engine address it was started with. These servers
stand in for both, on the SDK's own generated stubs and (de)serializers: every registration is
kept for the test to read, and each custom resource comes back as a preview (or an up) of the
real engine returns it: its inputs as its outputs, unknowns and secrets kept as sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
from google.protobuf import empty_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, resource_pb2, resource_pb2_grpc

STACK_TYPE = "pulumi:pulumi:Stack"
FEATURES = [
    resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS,
    resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES,
    resource_pb2.RESOURCE_MONITOR_FEATURE_OUTPUT_VALUES,
    resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS,
    resource_pb2.RESOURCE_MONITOR_FEATURE_DELETED_WITH,
]
"""What the monitor tells the SDK it supports, as a current engine does."""
FEATURE_IDS = {"secrets", "resourceReferences", "outputValues", "aliasSpecs", "deletedWith"}
"""The same, by the names an older SDK asks SupportsFeature about."""


@dataclass
class Registration:
    """One RegisterResource call: what the engine would diff and create."""

    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    """Deserialized as sent: unknowns as `pulumi.output.Unknown`, secrets as wrapped values."""
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]


def stack_urn(project: str, stack: str) -> str:
    """The URN of a project's stack resource."""
    return f"urn:pulumi:{stack}::{project}::{STACK_TYPE}::{project}-{stack}"


class ResourceMonitor(resource_pb2_grpc.ResourceMonitorServicer):
    """Keeps registrations and outputs; answers as a preview (or an up) of the engine would."""

    def __init__(self, project: str, stack: str, preview: bool) -> None:
        self.project = project
        self.stack = stack
        self.preview = preview
        self.registrations: list[Registration] = []
        self.outputs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def urn(self, parent: str, type_: str, name: str) -> str:
        """A resource's URN: its type qualified by its parents' (the stack's excluded)."""
        qualified = type_
        if parent and not parent.endswith(f"::{STACK_TYPE}::{self.project}-{self.stack}"):
            qualified = f"{parent.split('::')[2]}${type_}"
        return f"urn:pulumi:{self.stack}::{self.project}::{qualified}::{name}"

    def by_name(self) -> dict[str, Registration]:
        """Registrations by resource name."""
        with self._lock:
            return {r.name: r for r in self.registrations}

    def GetDeploymentInfo(self, request: Any, context: Any) -> resource_pb2.DeploymentInfo:
        return resource_pb2.DeploymentInfo(supportedFeatures=FEATURES)

    def SupportsFeature(self, request: Any, context: Any) -> resource_pb2.SupportsFeatureResponse:
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id in FEATURE_IDS)

    def RegisterResource(
        self, request: resource_pb2.RegisterResourceRequest, context: Any
    ) -> resource_pb2.RegisterResourceResponse:
        urn = self.urn(request.parent, request.type, request.name)
        registration = Registration(
            type=request.type,
            name=request.name,
            urn=urn,
            parent=request.parent,
            custom=request.custom,
            inputs=rpc.deserialize_properties(request.object, keep_unknowns=True),
            dependencies=list(request.dependencies),
            property_dependencies={
                key: list(deps.urns) for key, deps in request.propertyDependencies.items()
            },
        )
        with self._lock:
            self.registrations.append(registration)
        if not request.custom:
            return resource_pb2.RegisterResourceResponse(urn=urn)
        # The engine's preview answers with the checked inputs and an unknown id; an up with ids.
        return resource_pb2.RegisterResourceResponse(
            urn=urn, id="" if self.preview else f"{request.name}-id", object=request.object
        )

    def RegisterResourceOutputs(
        self, request: resource_pb2.RegisterResourceOutputsRequest, context: Any
    ) -> empty_pb2.Empty:
        with self._lock:
            self.outputs[request.urn] = rpc.deserialize_properties(
                request.outputs, keep_unknowns=True
            )
        return empty_pb2.Empty()


class Engine(engine_pb2_grpc.EngineServicer):
    """The engine service a provider logs to."""

    def __init__(self) -> None:
        self.logs: list[engine_pb2.LogRequest] = []
        self.root = ""

    def Log(self, request: engine_pb2.LogRequest, context: Any) -> empty_pb2.Empty:
        self.logs.append(request)
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> engine_pb2.GetRootResourceResponse:
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(self, request: Any, context: Any) -> engine_pb2.SetRootResourceResponse:
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()


@dataclass
class Served:
    """A servicer listening on loopback."""

    address: str
    servicer: Any
    server: grpc.Server = field(repr=False)


@contextmanager
def serving(servicer: ResourceMonitor | Engine) -> Iterator[Served]:
    """Serve a ResourceMonitor or an Engine on a free loopback port until the block ends."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    if isinstance(servicer, ResourceMonitor):
        resource_pb2_grpc.add_ResourceMonitorServicer_to_server(servicer, server)
    else:
        engine_pb2_grpc.add_EngineServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Served(address=f"127.0.0.1:{port}", servicer=servicer, server=server)
    finally:
        server.stop(grace=None)
