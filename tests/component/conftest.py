"""The component provider as the Pulumi engine runs it: one plugin process for the session."""

from collections.abc import Iterator

import pytest
from pulumi.runtime.proto import provider_pb2_grpc

from tests.support.provider_host import ROOT, provider_plugin
from tests.support.resource_monitor import Engine, Served, serving


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
