"""The model's structure has one source: the locked GGUF header, else the stack file before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.gguf_header import read_gguf_header, summarize
from infra.config import ConfigError
from infra.lock import ModelSource
from infra.plan.stack import llamacpp_inputs, model_structure
from infra.targets.registry import stack_plan
from tests.conftest import strix, unlocked_source
from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model

SPEC = TinyLlamaSpec(n_layer=3, n_embd=128, n_head=4, n_head_kv=1)


@pytest.fixture(scope="module")
def llama_summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The summary `llm-infra lock` records for a real 3-layer GQA llama GGUF."""
    directory = tmp_path_factory.mktemp("tiny")
    (path,) = write_tiny_model(directory, "tiny", 1, SPEC)
    with Path(path).open("rb") as handle:
        return summarize([read_gguf_header(handle)])


def locked(summary: dict[str, Any]) -> ModelSource:
    return ModelSource(
        revision="0" * 40,
        files=[{"path": "tiny-00001-of-00001.gguf", "name": "tiny-00001-of-00001.gguf",
                "size": summary["total_bytes"], "sha256": "0" * 64}],
        locked=True,
        gguf=summary,
    )  # fmt: skip


def bare_values(values: dict[str, Any]) -> dict[str, Any]:
    """The strix-halo stack without the model keys a lock supplies, for the tiny llama."""
    for key in ("architecture", "layers", "sizeGib", "metadata"):
        values["model"].pop(key)
    values["server"].update(gpuLayers=4, cacheTypeV="f16")
    return values


def test_a_locked_stack_needs_no_architecture_layers_size_or_metadata(
    strix_halo_values: dict[str, Any], llama_summary: dict[str, Any]
) -> None:
    stack = strix(bare_values(strix_halo_values))
    structure = model_structure(stack, locked(llama_summary))
    assert (structure.architecture, structure.layers) == ("llama", 3)
    inputs = llamacpp_inputs(stack, locked(llama_summary))
    # One KV head of four: the header's GQA, not the standard attention a default would give.
    assert inputs.attention.n_head_kv == (1, 1, 1)
    assert stack_plan(stack, locked(llama_summary)).fits


def test_without_a_lock_the_stack_must_name_architecture_and_layers(
    strix_halo_values: dict[str, Any],
) -> None:
    stack = strix(bare_values(strix_halo_values))
    with pytest.raises(ConfigError) as caught:
        llamacpp_inputs(stack, unlocked_source(stack))
    architecture, layers = caught.value.problems
    assert architecture.startswith("model.architecture: required until the model is locked")
    assert layers.startswith("model.layers: required until the model is locked")
    assert "llm-infra lock STACK" in architecture and "block_count" in layers


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("architecture", "qwen3moe", "model.architecture: 'qwen3moe', but the locked GGUF "
                                     "header says 'llama'"),
        ("layers", 4, "model.layers: 4, but the locked GGUF header says 3 (llama.block_count"),
        ("metadata", {"llama.attention.head_count_kv": 4},
         "model.metadata: llama.attention.head_count_kv is 4, but the locked GGUF header says 1"),
    ],
)  # fmt: skip
def test_a_stack_value_that_disagrees_with_the_header_names_both(
    strix_halo_values: dict[str, Any],
    llama_summary: dict[str, Any],
    key: str,
    value: Any,
    expected: str,
) -> None:
    values = bare_values(strix_halo_values)
    values["model"][key] = value
    stack = strix(values)
    with pytest.raises(ConfigError) as caught:
        model_structure(stack, locked(llama_summary))
    (problem,) = caught.value.problems
    assert problem.startswith(expected)


def test_agreeing_stack_values_are_accepted_floats_as_the_header_holds_them(
    strix_halo_values: dict[str, Any], llama_summary: dict[str, Any]
) -> None:
    values = bare_values(strix_halo_values)
    eps = llama_summary["metadata"]["llama.attention.layer_norm_rms_epsilon"]
    assert eps != 1e-5  # float32 in the file
    values["model"].update(
        architecture="llama",
        layers=3,
        metadata={"llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.block_count": 3},
    )
    assert model_structure(strix(values), locked(llama_summary)).layers == 3


def test_gpu_layers_are_checked_against_the_locked_layer_count(
    strix_halo_values: dict[str, Any], llama_summary: dict[str, Any]
) -> None:
    values = bare_values(strix_halo_values)
    values["server"]["gpuLayers"] = 5
    stack = strix(values)
    with pytest.raises(ConfigError) as caught:
        llamacpp_inputs(stack, locked(llama_summary))
    assert caught.value.problems == [
        "server.gpuLayers: 5 is more than the model's 3 layers "
        "(allowed 0-4; 4 also offloads the output layer)"
    ]
