"""One deployment (a preview or an up) of the YAML example's components through the provider:
the project, its component types and the inputs a YAML or TypeScript program passes."""

from __future__ import annotations

import re
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import yaml
from pulumi.output import Unknown
from pulumi.runtime.proto import errors_pb2, provider_pb2, provider_pb2_grpc, status_pb2

from components.vllm.inputs import VllmRocmServerArgs
from tests.support.component_inputs import wire_names
from tests.support.provider_host import (
    ROOT,
    UNKNOWN,
    construct,
    outputs,
    secret,
)
from tests.support.resource_monitor import Registration, ResourceMonitor, Served, stack_urn
from tests.support.vllm_samples import SSH_KEY, server_args

PROJECT, STACK = "llm-infra-example-yaml", "dev"
PARENT = stack_urn(PROJECT, STACK)


STORE = "llm-infra:index:GgufModelStore"


LLAMA = "llm-infra:index:LlamaCppVulkanServer"


VLLM = "llm-infra:index:VllmRocmServer"


NAMESPACE_URN = f"urn:pulumi:{STACK}::{PROJECT}::kubernetes:core/v1:Namespace::llm"


EXAMPLE = yaml.safe_load((ROOT / "examples" / "yaml-k3s" / "Pulumi.yaml").read_text())


API_KEY = "sk-live-0123456789abcdef"


HF_TOKEN = "hf_live_token_0123456789"


class Deployment:
    """One deployment (a preview or an up) against a fresh resource monitor."""

    def __init__(self, provider: provider_pb2_grpc.ResourceProviderStub, served: Served) -> None:
        self.provider = provider
        self.served = served
        self.monitor: ResourceMonitor = served.servicer

    def construct(
        self,
        token: str,
        name: str,
        inputs: dict[str, Any],
        input_dependencies: dict[str, list[str]] | None = None,
        dependencies: tuple[str, ...] = (),
        timeout: float = 60,
    ) -> provider_pb2.ConstructResponse:
        return construct(
            self.provider,
            monitor=self.served.address,
            project=PROJECT,
            stack=STACK,
            parent=PARENT,
            token=token,
            name=name,
            inputs=inputs,
            preview=self.monitor.preview,
            input_dependencies=input_dependencies,
            dependencies=dependencies,
            timeout=timeout,
        )

    def children(self, parent_urn: str) -> dict[str, Registration]:
        return {r.name: r for r in self.monitor.registrations if r.parent == parent_urn}

    def store(self, **overrides: Any) -> provider_pb2.ConstructResponse:
        """The YAML example's `models`."""
        properties = {**EXAMPLE["resources"]["models"]["properties"], **overrides}
        return self.construct(STORE, "models", properties)

    def server(
        self,
        store: provider_pb2.ConstructResponse,
        input_dependencies: dict[str, list[str]] | None = None,
        timeout: float = 60,
        **overrides: Any,
    ) -> provider_pb2.ConstructResponse:
        """The YAML example's `qwen`, its `${models.*}` taken from the store's outputs."""
        resource = EXAMPLE["resources"]["qwen"]
        # The engine sends what it does not know yet as unknowns again.
        known = {k: UNKNOWN if isinstance(v, Unknown) else v for k, v in outputs(store).items()}
        properties = {**resolve(resource["properties"], known), **overrides}
        assert resource["options"]["dependsOn"] == ["${models}"]
        return self.construct(
            LLAMA,
            "qwen",
            properties,
            # What the engine records for `${models.claimName}` inside `model`.
            input_dependencies={"model": [store.urn], **(input_dependencies or {})},
            dependencies=(store.urn,),
            timeout=timeout,
        )


def resolve(value: Any, store_outputs: dict[str, Any]) -> Any:
    """The YAML program's `${models.<output>}` references, as the engine resolves them."""
    if isinstance(value, str):
        match = re.fullmatch(r"\$\{models\.(\w+)\}", value)
        return store_outputs[match[1]] if match else value
    if isinstance(value, dict):
        return {k: resolve(v, store_outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, store_outputs) for v in value]
    return value


def vllm_inputs() -> dict[str, Any]:
    """A VllmRocmServer as a TypeScript or YAML program passes it: the sample server's inputs in
    camelCase, on SSH port 2222, its SSH key and API key secret."""
    args = server_args(api_key=API_KEY, startup_timeout_seconds=1800)
    inputs: dict[str, Any] = wire_names(args, VllmRocmServerArgs)
    inputs["connection"] |= {"port": 2222, "privateKey": secret(SSH_KEY)}
    inputs["apiKey"] = secret(API_KEY)
    return inputs


def input_errors(error: grpc.RpcError) -> list[tuple[str, str]]:
    """The provider's InputPropertiesError details, as the engine reads them."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            details = errors_pb2.InputPropertiesError()
            status.details[0].Unpack(details)
            return [(e.property_path, e.reason) for e in details.errors]
    return []
