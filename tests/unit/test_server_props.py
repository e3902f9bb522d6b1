"""The server-properties check: llama-server's `/props` (a recorded real answer) and vLLM's
`/v1/models` against what the render expects."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from components.llamacpp.expected_props import expected_props, image_build, slot_cells
from components.payloads import props
from components.vllm.builders import expected_models
from infra.config.feeds import fed
from infra.targets.kubernetes import server_args
from tests.conftest import MODEL_VOLUME, PROPS_FIXTURE, strix, unlocked_source


@pytest.fixture
def answer() -> dict[str, Any]:
    """The real /props answer of the fixture's server (-c 8192 -np 4, the tiny model)."""
    loaded: dict[str, Any] = json.loads(PROPS_FIXTURE.read_text())
    return loaded


def fixture_server_args(values: dict[str, Any], **flags: Any) -> Any:
    """The strix-halo stack's server args, with the flags the fixture's server ran with."""
    stack = strix(values)
    args: Any = server_args(stack, fed(stack), unlocked_source(stack), MODEL_VOLUME)  # type: ignore[arg-type]
    args["flags"] = {
        **args["flags"],
        "model_path": "/tmp/llm-infra-props/models/tiny-00001-of-00003.gguf",
        "ctx_size": 8192,
        "parallel": 4,
        **flags,
    }
    return args


def test_the_recorded_answer_matches_the_args_its_server_ran_with(
    strix_halo_values: dict[str, Any], answer: dict[str, Any]
) -> None:
    doc = expected_props(fixture_server_args(strix_halo_values))
    assert props.props_problems(doc, answer) == []
    fields = [props.field_name(item["path"]) for item in doc["checks"]]
    assert fields == [
        "build_info",
        "model_path",
        "total_slots",
        "default_generation_settings.n_ctx",
        "chat_template",
    ]
    assert props.summary(doc).startswith("/props: as rendered (build_info, model_path, ")


@pytest.mark.parametrize(
    ("path", "value", "line"),
    [
        (
            ["build_info"],
            "b11433-0a1b2c3",
            '/props build_info: "b11433-0a1b2c3", rendered image: "b11434"',
        ),
        (
            ["model_path"],
            "/models/other-00001-of-00003.gguf",
            '/props model_path: "/models/other-00001-of-00003.gguf", rendered flags.model_path: '
            '"/tmp/llm-infra-props/models/tiny-00001-of-00003.gguf"',
        ),
        (["total_slots"], 2, "/props total_slots: 2, rendered flags.parallel: 4"),
        (
            ["default_generation_settings", "n_ctx"],
            4096,
            "/props default_generation_settings.n_ctx: 4096, rendered flags.ctx_size / "
            "flags.parallel: 2048",
        ),
        (
            ["chat_template"],
            "",
            '/props chat_template: "" (empty), rendered flags.model_path: a chat template',
        ),
    ],
)
def test_each_mismatch_is_one_line_naming_both_values(
    strix_halo_values: dict[str, Any],
    answer: dict[str, Any],
    path: list[str],
    value: Any,
    line: str,
) -> None:
    doc = expected_props(fixture_server_args(strix_halo_values))
    changed = copy.deepcopy(answer)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert props.props_problems(doc, changed) == [line]


def test_a_field_the_server_does_not_report_is_absent(
    strix_halo_values: dict[str, Any], answer: dict[str, Any]
) -> None:
    doc = expected_props(fixture_server_args(strix_halo_values))
    del answer["total_slots"]
    del answer["default_generation_settings"]
    assert props.props_problems(doc, answer) == [
        "/props total_slots: absent, rendered flags.parallel: 4",
        "/props default_generation_settings.n_ctx: absent, rendered flags.ctx_size / "
        "flags.parallel: 2048",
    ]


def test_a_number_as_text_is_a_mismatch(
    strix_halo_values: dict[str, Any], answer: dict[str, Any]
) -> None:
    doc = expected_props(fixture_server_args(strix_halo_values))
    answer["total_slots"] = "4"
    assert props.props_problems(doc, answer) == [
        '/props total_slots: "4", rendered flags.parallel: 4'
    ]


def test_the_stack_names_its_own_keys(
    strix_halo_values: dict[str, Any], answer: dict[str, Any]
) -> None:
    from infra.config.inputs import stack_key

    def key(path: str) -> str:
        return stack_key("LlamaCppVulkanServer", tuple(path.split(".")))

    doc = expected_props(fixture_server_args(strix_halo_values, parallel=2, ctx_size=4096), key)
    assert props.props_problems(doc, answer) == [
        "/props total_slots: 4, rendered server.parallel: 2",
    ]


@pytest.mark.parametrize(
    ("words", "cells", "source"),
    [
        ([], 2048, "flags.ctx_size / flags.parallel"),
        # One stream of the whole context, every slot sees all of it.
        (["--kv-unified"], 8192, "flags.ctx_size (extra_args --kv-unified)"),
        (["-kvu", "--no-kv-unified"], 2048, "flags.ctx_size / flags.parallel"),
        (["-kvu", "--kv-unified-per-slot", "3000"], 3000, "extra_args --kv-unified-per-slot"),
        # A cap above the slot's cells never binds.
        (["--kv-unified-per-slot", "3000"], 2048, "flags.ctx_size / flags.parallel"),
    ],
)
def test_slot_context_reads_the_kv_options_of_the_extra_args(
    strix_halo_values: dict[str, Any], words: list[str], cells: int, source: str
) -> None:
    args = fixture_server_args(strix_halo_values)
    args["extra_args"] = words
    (context,) = [c for c in expected_props(args)["checks"] if c["path"][-1] == "n_ctx"]
    assert (context["expected"], context["rendered"]) == (cells, source)


def test_slot_cells_pad_like_llama_context() -> None:
    # -c 1000 pads to 1024; shared by 3 slots: 341 cells each, padded to 512.
    assert slot_cells(1000, 3, False) == 512
    assert slot_cells(1000, 3, True) == 1024
    assert slot_cells(65536, 1, False) == 65536


def test_an_image_without_a_build_tag_skips_the_build_with_a_note(
    strix_halo_values: dict[str, Any], answer: dict[str, Any]
) -> None:
    args = fixture_server_args(strix_halo_values)
    args["image"] = "registry.example/llama@sha256:" + "a" * 64
    doc = expected_props(args)
    assert all(item["path"] != ["build_info"] for item in doc["checks"])
    assert doc["notes"] == [
        "build_info: not checked (image 'registry.example/llama@sha256:"
        + "a" * 64
        + "' names no llama.cpp build tag such as server-vulkan-b11434)"
    ]
    answer["build_info"] = "b1-other"
    assert props.props_problems(doc, answer) == []
    assert image_build("ghcr.io/ggml-org/llama.cpp:server-rocm-b11434") == "b11434"
    assert image_build("ghcr.io/ggml-org/llama.cpp:server-vulkan") is None


def test_vllm_models_card_is_checked_by_name_path_and_length() -> None:
    flags: Any = {
        "model": "/models/DeepSeek-V4-Flash-0731",
        "served_model_name": "deepseek-v4-flash-0731",
        "max_model_len": 262144,
    }
    doc = expected_models(flags)
    # The shape of vLLM 0.33's ModelCard (vllm/entrypoints/serve/engine/protocol.py).
    card: dict[str, Any] = {
        "id": "deepseek-v4-flash-0731",
        "object": "model",
        "owned_by": "vllm",
        "root": "/models/DeepSeek-V4-Flash-0731",
        "parent": None,
        "max_model_len": 262144,
        "permission": [],
    }
    assert props.props_problems(doc, {"object": "list", "data": [card]}) == []
    short = {"object": "list", "data": [{**card, "max_model_len": 131072}]}
    assert props.props_problems(doc, short) == [
        "/v1/models data[0].max_model_len: 131072, rendered flags.max_model_len: 262144"
    ]
    assert props.props_problems(doc, {"object": "list", "data": []})[0] == (
        '/v1/models data[0].id: absent, rendered flags.served_model_name: "deepseek-v4-flash-0731"'
    )
    assert doc["notes"] == [
        "vLLM has no /props: its build, slots and chat template are not checked"
    ]


def test_props_files_are_checked_when_read(
    tmp_path: Path, strix_halo_values: dict[str, Any]
) -> None:
    doc = expected_props(fixture_server_args(strix_halo_values))
    path = tmp_path / "props.json"
    path.write_text(props.props_text(doc))
    assert props.load_props(path) == doc
    path.write_text(json.dumps({**doc, "format": "llm-infra-props/0"}))
    with pytest.raises(ValueError, match="format is 'llm-infra-props/0'"):
        props.load_props(path)
    path.write_text(json.dumps({**doc, "checks": [{"path": [], "match": "equal"}]}))
    with pytest.raises(ValueError, match=r"checks\[0\] is not"):
        props.load_props(path)


def test_a_long_value_is_cut_in_the_line(
    strix_halo_values: dict[str, Any], answer: dict[str, Any]
) -> None:
    doc = expected_props(fixture_server_args(strix_halo_values))
    answer["model_path"] = "/m/" + "x" * 500
    (line,) = props.props_problems(doc, answer)
    assert "... (505 characters)" in line and len(line) < 400
