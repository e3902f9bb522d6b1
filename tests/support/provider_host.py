"""`provider/` started as Pulumi starts a plugin, and the provider protocol spoken to it.

Pulumi's Python language host runs a source plugin (PulumiPlugin.yaml, `runtime: python`) as
`python <plugin dir> <engine address>` with the plugin's virtualenv, in the consuming program's
directory; the plugin prints the port of its gRPC server on the first line of stdout. Here the
virtualenv is the project's own, which holds what `provider/requirements.txt` installs.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "provider"
STARTUP_TIMEOUT_S = 60

UNKNOWN = rpc.UNKNOWN
"""A value the engine does not know yet (a preview), as it marshals one."""


def secret(value: Any) -> dict[str, Any]:
    """A secret value as the engine marshals it."""
    wrapped: dict[str, Any] = rpc.wrap_rpc_secret(value)
    return wrapped


def wire(values: Mapping[str, Any]) -> struct_pb2.Struct:
    """Property values as a protobuf Struct, as the engine sends them: every number a double."""
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def plugin_command(engine_address: str) -> list[str]:
    """The command Pulumi's Python language host runs for this plugin."""
    manifest = yaml.safe_load((PLUGIN_DIR / "PulumiPlugin.yaml").read_text())
    runtime = manifest["runtime"]
    if runtime["name"] != "python" or not (PLUGIN_DIR / "__main__.py").is_file():
        raise RuntimeError(f"{PLUGIN_DIR} is not a Python source plugin with a __main__.py")
    return [sys.executable, str(PLUGIN_DIR), engine_address]


@contextmanager
def provider_plugin(
    engine_address: str, cwd: Path
) -> Iterator[provider_pb2_grpc.ResourceProviderStub]:
    """Start the plugin, read its port handshake, and yield a configured provider client."""
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            plugin_command(engine_address),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert process.stdout is not None
            first_line = process.stdout.readline().strip()
            if not first_line.isdigit():
                process.kill()
                stderr.seek(0)
                raise RuntimeError(f"provider did not start: {first_line!r}\n{stderr.read()}")
            channel = grpc.insecure_channel(f"127.0.0.1:{first_line}")
            grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT_S)
            provider = provider_pb2_grpc.ResourceProviderStub(channel)
            # The engine configures a provider before it constructs anything with it.
            provider.Configure(
                provider_pb2.ConfigureRequest(acceptSecrets=True, acceptResources=True)
            )
            try:
                yield provider
            finally:
                channel.close()
        finally:
            process.terminate()
            process.wait(timeout=10)


def construct(
    provider: provider_pb2_grpc.ResourceProviderStub,
    *,
    monitor: str,
    project: str,
    stack: str,
    parent: str,
    token: str,
    name: str,
    inputs: Mapping[str, Any],
    preview: bool,
    input_dependencies: Mapping[str, Sequence[str]] | None = None,
    dependencies: Sequence[str] = (),
    timeout: float = 60,
) -> provider_pb2.ConstructResponse:
    """One Construct call, as the engine makes it for a program's remote component."""
    response: provider_pb2.ConstructResponse = provider.Construct(
        provider_pb2.ConstructRequest(
            project=project,
            stack=stack,
            organization="organization",
            dryRun=preview,
            parallel=4,
            monitorEndpoint=monitor,
            type=token,
            name=name,
            parent=parent,
            inputs=wire(inputs),
            inputDependencies={
                key: provider_pb2.ConstructRequest.PropertyDependencies(urns=list(urns))
                for key, urns in (input_dependencies or {}).items()
            },
            dependencies=list(dependencies),
            accepts_output_values=True,
        ),
        timeout=timeout,
    )
    return response


def outputs(response: provider_pb2.ConstructResponse) -> dict[str, Any]:
    """The component's outputs as the engine reads them (unknowns and secrets kept)."""
    state: dict[str, Any] = rpc.deserialize_properties(response.state, keep_unknowns=True)
    return state


def output_dependencies(response: provider_pb2.ConstructResponse) -> dict[str, set[str]]:
    """Each output's resource dependencies, by URN."""
    return {key: set(deps.urns) for key, deps in response.stateDependencies.items()}
