"""The measurement behind `bench.speed_measure` and `tune` on real llama-server b11434 (CPU
build, a random-weight model): a warm-up request leaves its prompt in the slot, so a measured
run that starts with the same prompt prefills one token. Such a run's prefill is not counted,
and the warm-up `bench.speed_measure` sends starts elsewhere in the token cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.payloads.tune_measure import DepthFigures, measure_depth
from tests.support.llama_server import run_llama_server, tiny_server_argv
from tests.support.tiny_gguf import write_tiny_model_seeded
from tests.support.verify_models import SMALL_F16

PROMPT = 32
"""Tokens of each run's prompt (and 4 decoded): small enough for a tiny model on a CPU."""


def measure(url: str, depth: int, runs: int, skip_windows: int = 0) -> DepthFigures:
    return measure_depth(
        url, depth, runs=runs, prefill_tokens=PROMPT, decode_tokens=4, skip_windows=skip_windows
    )


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_seeded(tmp_path_factory.mktemp("m"), "m", 1, SMALL_F16, seed=5)[0]


def test_a_run_on_the_warm_ups_own_prompt_is_no_prefill_and_is_not_counted(model: Path) -> None:
    with run_llama_server(tiny_server_argv(model, "--threads", "1", parallel=1)) as url:
        measure(url, 0, runs=1)
        figures = measure(url, 0, runs=2)
    # The first run's prompt is the warm-up's: the slot held all of it but the last token.
    assert figures.cached_tokens[0] >= PROMPT - 1
    assert figures.cached_tokens[1] == 0
    assert len(figures.prefill.values) == len(figures.prefill_server.values) == 1
    assert len(figures.decode_server.values) == 2  # its decode still counts


def test_a_warm_up_on_a_window_of_its_own_leaves_every_run_a_whole_prefill(model: Path) -> None:
    with run_llama_server(tiny_server_argv(model, "--threads", "1", parallel=1)) as url:
        measure(url, 0, runs=1, skip_windows=2)
        figures = measure(url, 0, runs=2)
        deep = measure(url, 64, runs=2)
    assert figures.cached_tokens == [0, 0]
    assert len(figures.prefill.values) == len(figures.prefill_server.values) == 2
    assert deep.cached_tokens == [64, 64] and len(deep.prefill.values) == 2
