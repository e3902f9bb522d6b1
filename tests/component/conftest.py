"""The component provider as the Pulumi engine runs it: one plugin process for the session, and
one deployment (a preview or an up) of its components per test."""

from collections.abc import Iterator

import pytest
from pulumi.runtime.proto import provider_pb2_grpc

from tests.support.provider_deploy import PROJECT, STACK, Deployment
from tests.support.provider_host import ROOT, provider_plugin
from tests.support.resource_monitor import Engine, ResourceMonitor, Served, serving


@pytest.fixture(scope="session")
def engine() -> Iterator[Served]:
    """The engine service the plugin is started with (it logs there)."""
    with serving(Engine()) as served:
        yield served


@pytest.fixture(scope="session")
def provider(engine: Served) -> Iterator[provider_pb2_grpc.ResourceProviderStub]:
    """`provider/` started as Pulumi starts it, from the YAML example's directory."""
    with provider_plugin(engine.address, cwd=ROOT / "examples" / "yaml-k3s") as stub:
        yield stub


@pytest.fixture
def preview(provider: provider_pb2_grpc.ResourceProviderStub) -> Iterator[Deployment]:
    with serving(ResourceMonitor(PROJECT, STACK, preview=True)) as served:
        yield Deployment(provider, served)


@pytest.fixture
def up(provider: provider_pb2_grpc.ResourceProviderStub) -> Iterator[Deployment]:
    with serving(ResourceMonitor(PROJECT, STACK, preview=False)) as served:
        yield Deployment(provider, served)
