"""One provider process under a stream of Constructs, good and refused mixed, as a YAML or
TypeScript program with many components (or a long-lived engine) sends them: every one is
answered within 10 s, the good ones with their component and the refused ones naming the input.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import pytest
from pulumi.runtime.proto import provider_pb2_grpc

from tests.support.provider_deploy import (
    EXAMPLE,
    LLAMA,
    PROJECT,
    STACK,
    STORE,
    VLLM,
    Deployment,
    input_errors,
    vllm_inputs,
)
from tests.support.provider_host import ROOT, provider_plugin
from tests.support.resource_monitor import Engine, ResourceMonitor, serving

CONSTRUCTS = 200
KINDS = 9
ANSWER_WITHIN_S = 10.0
STORE_PROPERTIES = EXAMPLE["resources"]["models"]["properties"]
FLAGS = EXAMPLE["resources"]["qwen"]["properties"]["flags"]


@pytest.fixture(scope="module")
def own_provider() -> Iterator[provider_pb2_grpc.ResourceProviderStub]:
    """A provider process of this module's own, fresh for the stream."""
    with (
        serving(Engine()) as engine,
        provider_plugin(engine.address, cwd=ROOT / "examples" / "yaml-k3s") as stub,
    ):
        yield stub


def vllm_with(**changes: Any) -> dict[str, Any]:
    inputs = vllm_inputs()
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = inputs
        for part in parents:
            node = node[part]
        node[last] = value
    return inputs


def kinds(deployment: Deployment, index: int) -> list[tuple[str, Callable[[], Any], str | None]]:
    """(what, the call, the refused input's path or None for a good one)."""
    store = deployment.store
    return [
        ("store", lambda: deployment.construct(STORE, f"models-{index}", STORE_PROPERTIES,
                                               timeout=ANSWER_WITHIN_S), None),
        ("server", lambda: deployment.server(deployment.store(), timeout=ANSWER_WITHIN_S), None),
        ("vllm", lambda: deployment.construct(VLLM, f"v-{index}", vllm_inputs(),
                                              timeout=ANSWER_WITHIN_S), None),
        ("undeclared", lambda: deployment.construct(
            LLAMA, f"q-{index}", {"apikey": "sk"}, timeout=ANSWER_WITHIN_S), "apikey"),
        ("nan", lambda: deployment.server(store(), flags={**FLAGS, "gpuLayers": float("nan")},
                                          timeout=ANSWER_WITHIN_S), "flags.gpuLayers"),
        ("in-an-apply", lambda: deployment.construct(
            VLLM, f"v-{index}", vllm_with(connection__port=99999), timeout=ANSWER_WITHIN_S),
         "connection.port"),
        ("huge-disk", lambda: deployment.construct(
            VLLM, f"v-{index}", vllm_with(requirements__minFreeDiskGib=1e30),
            timeout=ANSWER_WITHIN_S), "requirements.minFreeDiskGib"),
        ("shell-name", lambda: deployment.construct(
            STORE, f"models-{index}",
            {**STORE_PROPERTIES, "files": [{"path": "x$(touch y).json",
                                             "name": "x$(touch y).json"}]},
            timeout=ANSWER_WITHIN_S), "files[0]"),
        ("lock-name", lambda: deployment.construct(
            VLLM, f"v-{index}",
            vllm_with(modelLock__files=[{"path": "x$(touch y).json", "name": "x$(touch y).json",
                                         "size": 1, "sha256": "1" * 64}]),
            timeout=ANSWER_WITHIN_S), "modelLock.files[0]"),
    ]  # fmt: skip


def test_every_construct_of_a_long_mixed_stream_is_answered_in_time(
    own_provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    slowest = 0.0
    for index in range(CONSTRUCTS):
        with serving(ResourceMonitor(PROJECT, STACK, preview=bool(index % 2))) as served:
            deployment = Deployment(own_provider, served)
            what, call, refused = kinds(deployment, index)[index % KINDS]
            started = time.monotonic()
            try:
                call()
                assert refused is None, f"#{index} {what}: accepted"
            except grpc.RpcError as exc:
                assert exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED, (
                    f"#{index} {what}: no answer"
                )
                assert refused is not None, f"#{index} {what}: {exc.details()}"
                assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (what, exc.details())
                paths = [path for path, _ in input_errors(exc)]
                assert any(p.startswith(refused) for p in paths), (what, paths, exc.details())
            slowest = max(slowest, time.monotonic() - started)
    print(f"{CONSTRUCTS} Constructs, slowest answer {slowest:.2f} s")
