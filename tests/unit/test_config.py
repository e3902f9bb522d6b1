"""Validation of stack config: every rule names its key and says what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import quantity_value
from tests.conftest import problems_of, strix


def test_seed_stack_holds_every_seed_value(strix_halo_values: dict[str, Any]) -> None:
    stack = strix(strix_halo_values)
    server = stack.server
    assert stack.model.repo == "unsloth/DeepSeek-V4-Flash-0731-GGUF"
    assert stack.model.file_names == [
        f"DeepSeek-V4-Flash-0731-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert (server.alias, server.host, server.port) == ("deepseek-v4-flash-0731", "0.0.0.0", 8080)
    assert (server.gpu_layers, server.context_size, server.parallel) == (40, 65536, 1)
    assert (server.cache_type_k, server.cache_type_v) == ("q8_0", "q8_0")
    assert (server.temperature, server.top_p, server.threads) == (1.0, 0.95, 8)
    assert server.jinja and server.cont_batching
    assert server.node_selector == {"kubernetes.io/arch": "amd64", "hardware": "high-memory"}
    assert server.resources.requests.model_dump() == {"cpu": "1000m", "memory": "4Gi"}
    assert server.resources.limits.model_dump() == {"cpu": "4000m", "memory": "20Gi"}
    readiness, liveness = server.probes.readiness, server.probes.liveness
    assert (readiness.path, readiness.initial_delay_seconds, readiness.period_seconds) == (
        "/health", 30, 10,
    )  # fmt: skip
    assert readiness.failure_threshold == 6
    assert (liveness.path, liveness.period_seconds, liveness.failure_threshold) == (
        "/health",
        30,
        5,
    )
    assert server.probes.startup.window_seconds >= 300
    assert server.server_image == "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434"
    assert stack.store.retired_patterns == ["Qwen3.6*.gguf"]


def test_gpu_layers_above_model_layer_count_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["gpuLayers"] = 45
    assert problems_of(strix_halo_values) == [
        "server.gpuLayers: 45 is more than the model's 43 layers "
        "(allowed 0-44; 44 also offloads the output layer)"
    ]


def test_full_offload_counts_the_output_layer(strix_halo_values: dict[str, Any]) -> None:
    # llama.cpp b11434: -ngl n_layer+1 puts every repeating layer and the output layer on the GPU.
    strix_halo_values["server"]["gpuLayers"] = 44
    assert strix(strix_halo_values).server.gpu_layers == 44


def test_context_below_required_minimum_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["contextSize"] = 32768
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.contextSize: 32768 is below the 65536 tokens")
    assert "server.minSlotContext" in problem


def test_slots_that_leave_less_than_minimum_per_slot_are_rejected(
    strix_halo_values: dict[str, Any],
) -> None:
    strix_halo_values["server"]["parallel"] = 2
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.parallel: 2 slots leave 32768 tokens per slot")
    assert "raise server.contextSize to 131072" in problem


def test_more_slots_with_enough_context_are_accepted(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"].update(parallel=2, contextSize=131072)
    assert strix(strix_halo_values).server.parallel == 2


def test_unknown_cache_type_is_rejected_with_allowed_set(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["cacheTypeK"] = "q6_k"
    strix_halo_values["server"]["cacheTypeV"] = "q6_k"
    problems = problems_of(strix_halo_values)
    assert len(problems) == 2
    assert problems[0].startswith("server.cacheTypeK: 'q6_k': Input should be 'f32', 'f16'")
    assert "'iq4_nl'" in problems[0] and "'q5_1'" in problems[0]
    assert problems[1].startswith("server.cacheTypeV: 'q6_k'")


def test_different_k_and_v_cache_types_are_rejected_for_deepseek4(
    strix_halo_values: dict[str, Any],
) -> None:
    strix_halo_values["server"]["cacheTypeV"] = "f16"
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.cacheTypeV: 'f16' differs from server.cacheTypeK 'q8_0'")


def test_different_k_and_v_cache_types_are_allowed_for_other_architectures(
    strix_halo_values: dict[str, Any],
) -> None:
    strix_halo_values["model"]["architecture"] = "llama"
    strix_halo_values["server"]["cacheTypeV"] = "f16"
    assert strix(strix_halo_values).server.cache_type_v == "f16"


def test_an_architecture_llama_cpp_names_with_a_hyphen_is_accepted(
    strix_halo_values: dict[str, Any],
) -> None:
    strix_halo_values["model"]["architecture"] = "gpt-oss"
    assert strix(strix_halo_values).model.architecture == "gpt-oss"


@pytest.mark.parametrize("name", ["gpt oss", "-gpt", "GPT-OSS", "gpt/oss", "a" * 65])
def test_an_architecture_outside_the_gguf_readers_grammar_is_refused(
    strix_halo_values: dict[str, Any], name: str
) -> None:
    from components.gguf_header import _ARCHITECTURE

    strix_halo_values["model"]["architecture"] = name
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("model.architecture:")
    assert not _ARCHITECTURE.fullmatch(name)  # the reader refuses it too


@pytest.mark.parametrize(
    ("name", "nearest"), [("gptoss", "gpt-oss"), ("qwen3-moe", "qwen3moe"), ("gemma-3", "gemma3")]
)
def test_an_architecture_llama_cpp_does_not_load_is_refused_with_the_nearest_names(
    strix_halo_values: dict[str, Any], name: str, nearest: str
) -> None:
    strix_halo_values["model"]["architecture"] = name
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("model.architecture:")
    assert "is not an architecture llama.cpp b11434 loads" in problem
    assert f"the nearest: {nearest}" in problem


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_ports_outside_range_are_rejected(strix_halo_values: dict[str, Any], port: int) -> None:
    strix_halo_values["server"]["port"] = port
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith(f"server.port: {port}: Input should be")


def test_service_port_outside_range_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["servicePort"] = 70000
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.servicePort: 70000: Input should be less than or equal")


@pytest.mark.parametrize("alias", ["", "two words"])
def test_empty_or_spaced_alias_is_rejected(strix_halo_values: dict[str, Any], alias: str) -> None:
    strix_halo_values["server"]["alias"] = alias
    problems = problems_of(strix_halo_values)
    assert problems[0].startswith(f"server.alias: {alias!r}:")


def test_floating_image_tag_is_rejected_unless_allowed(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["image"] = "ghcr.io/ggml-org/llama.cpp:server-vulkan"
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith(
        "server.image: 'ghcr.io/ggml-org/llama.cpp:server-vulkan' is a floating tag"
    )
    assert "server.allowFloatingImage: true" in problem
    strix_halo_values["server"]["allowFloatingImage"] = True
    assert strix(strix_halo_values).server.server_image.endswith(":server-vulkan")


def test_floating_fetch_image_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["store"]["fetchImage"] = "python:3.12-slim"
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("store.fetchImage: 'python:3.12-slim' is a floating tag")


def test_malformed_image_reference_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["image"] = "Ghcr.io/x:y@sha256:abc"
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith(
        "server.image: 'Ghcr.io/x:y@sha256:abc' is not an image reference: digest"
    )


def test_unknown_key_is_rejected_with_its_path(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["gpuLayer"] = 40
    assert problems_of(strix_halo_values) == [
        "server.gpuLayer: unknown key (did you mean gpuLayers?)"
    ]


def test_an_unknown_key_far_from_any_gets_no_guess(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["zzz"] = 40
    assert problems_of(strix_halo_values) == ["server.zzz: unknown key"]


def test_missing_required_key_is_named(strix_halo_values: dict[str, Any]) -> None:
    del strix_halo_values["server"]["gpuLayers"]
    assert problems_of(strix_halo_values) == ["server.gpuLayers: is required"]


def test_wrong_type_is_named(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["threads"] = "eight"
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.threads: 'eight': Input should be a valid integer")


def test_unknown_target_is_rejected() -> None:
    assert problems_of({"target": "nomad"}) == [
        "target: 'nomad' is not a known target (allowed: kubernetes, docker-host)"
    ]


def test_incomplete_shard_set_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    del strix_halo_values["model"]["files"][1]
    assert problems_of(strix_halo_values) == [
        "model.files: incomplete shard set, -00002-of-00003 absent"
    ]


def test_first_shard_must_come_first(strix_halo_values: dict[str, Any]) -> None:
    files = strix_halo_values["model"]["files"]
    files[0], files[1] = files[1], files[0]
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("model.files[0]: the first shard")


def test_several_problems_are_reported_together(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"].update(gpuLayers=50, contextSize=1024)
    problems = problems_of(strix_halo_values)
    assert [p.split(":")[0] for p in problems] == ["server.gpuLayers", "server.contextSize"]


def test_startup_probe_shorter_than_load_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["probes"] = {
        "startup": {"initialDelaySeconds": 0, "periodSeconds": 10, "failureThreshold": 6}
    }
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.probes.startup: allows 60s to load, less than")


def test_request_above_limit_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["resources"]["requests"]["memory"] = "32Gi"
    assert problems_of(strix_halo_values) == [
        "server.resources.requests.memory: 32Gi is more than the limit 20Gi"
    ]


def test_malformed_quantity_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["store"]["size"] = "120GB"
    (problem,) = problems_of(strix_halo_values)
    assert problem == "store.size: '120GB' is not a Kubernetes quantity: write 120Gi"


def test_quantities_compare_across_units() -> None:
    assert quantity_value("1000m") == quantity_value("1")
    assert quantity_value("20Gi") == 20 * 2**30
    assert quantity_value("4G") == 4e9


def test_render_group_only_applies_to_device_plugin_mode(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["renderGroupId"] = 991
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith(
        "server.renderGroupId: only used with server.gpuAccess: device-plugin"
    )
    strix_halo_values["server"]["gpuAccess"] = "device-plugin"
    assert strix(strix_halo_values).server.render_group_id == 991


def test_unknown_gpu_access_mode_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["server"]["gpuAccess"] = "passthrough"
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("server.gpuAccess: 'passthrough': Input should be 'privileged'")


def test_network_policy_without_clients_is_rejected(strix_halo_values: dict[str, Any]) -> None:
    strix_halo_values["network"] = {"clients": []}
    (problem,) = problems_of(strix_halo_values)
    assert problem.startswith("network.clients: empty, so nothing could reach the server")
