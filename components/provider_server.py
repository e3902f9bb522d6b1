"""The component provider's gRPC server: the SDK's, with one answer changed (`provider/` runs
`serve`)."""

import argparse
import asyncio
import contextlib
import sys
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import pulumi
from pulumi.provider import Provider
from pulumi.provider.server import ProviderServicer
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
from pulumi.runtime.proto import provider_pb2_grpc

from components.validation import ComponentInputError, named, schema_path


class LlmInfraServicer(ProviderServicer):
    """The SDK's gRPC servicer, with a refusal found while an input resolves (an object input
    that holds a secret or another resource's output is validated inside an apply) answered as
    the engine reads refusals: INVALID_ARGUMENT, each problem under the input's schema path. The
    SDK lets such an error (a RunError) through as an unexpected failure with no path."""

    async def Construct(self, request: Any, context: Any) -> Any:
        try:
            return await super().Construct(request, context)
        except ComponentInputError as exc:
            errors: list[pulumi.InputPropertyErrorDetails] = [
                {"property_path": schema_path(loc), "reason": named(message, schema_path)}
                for loc, message in exc.problems
            ]
            lines = "".join(f"\n{e['property_path']}: {e['reason']}" for e in errors)
            message = f"invalid inputs of {exc.component} {request.name!r}:{lines}"
            await context.abort_with_status(
                self.create_grpc_invalid_properties_status(message, errors)
            )
            raise


def serve(provider: Provider, args: list[str]) -> None:
    """`pulumi.provider.main` with LlmInfraServicer: print the port, serve until stopped."""
    parser = argparse.ArgumentParser(description="The llm-infra component provider (gRPC)")
    parser.add_argument("engine", help="the Pulumi engine's address")
    parser.add_argument("--logflow", action="store_true", help="ignored, as by the SDK")
    parser.add_argument("--logtostderr", action="store_true", help="ignored, as by the SDK")
    known, _ = parser.parse_known_args(args)

    async def run() -> None:
        server = grpc.aio.server(options=_GRPC_CHANNEL_OPTIONS)
        servicer = LlmInfraServicer(provider, args, engine_address=known.engine)
        provider_pb2_grpc.add_ResourceProviderServicer_to_server(servicer, server)
        port = server.add_insecure_port(address="127.0.0.1:0")
        await server.start()
        sys.stdout.buffer.write(f"{port}\n".encode())
        sys.stdout.buffer.flush()
        await server.wait_for_termination()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
