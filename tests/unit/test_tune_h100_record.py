"""The bake-off on a real GPU, from what it recorded: the rendered strix-halo argv with the
llama-server b11434 Vulkan build on an NVIDIA H100 (`python3 -m bench.tune --gpu`; provenance in
tests/fixtures/tune/README.md).

Deciding again from the record's figures must give its winner, verdicts and reasons, and the
gate must pass every measured candidate's captured load and reject the hidden-driver one, from
its own captured output, for the reason the record holds."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from components.payloads.tune_figures import REJECTED, CandidateResult, decide
from components.payloads.tune_local import gate_rejection
from tests.conftest import ROOT

H100 = ROOT / "tests" / "fixtures" / "tune" / "h100"
RECORD: dict[str, Any] = json.loads((H100 / "tune.json").read_text())
GPU_LAYERS = {"vulkan-ngl-40": "40", "vulkan-ngl-99": "99", "vulkan-ngl-20": "20"}
"""Each candidate's -ngl: the stack's 40, every layer, and fewer (a really slower candidate)."""


def captured(name: str) -> str:
    """What the runner read after the load: the server's output, then its --log-file (the same
    text at -lv 4 for the measured candidates, so one file of the two is kept)."""
    if (H100 / f"{name}.out").exists():
        return (H100 / f"{name}.out").read_text() + "\n" + (H100 / f"{name}.log").read_text()
    log = gzip.decompress((H100 / f"{name}.log.gz").read_bytes()).decode()
    return log + "\n" + log


def test_the_record_is_the_stack_as_rendered_against_more_and_fewer_layers_and_no_driver() -> None:
    names = [c["name"] for c in RECORD["candidates"]]
    assert names == ["vulkan-ngl-40", "vulkan-ngl-99", "vulkan-ngl-20", "driver-hidden"]
    assert [c["name"] for c in RECORD["candidates"] if c["current"]] == ["vulkan-ngl-40"]
    assert RECORD["depths"] == [0, 32768, 64512] and RECORD["runs"] == 3


def test_deciding_again_from_the_figures_gives_the_recorded_winner_verdicts_and_reasons() -> None:
    results = [CandidateResult.from_json(c) for c in RECORD["candidates"]]
    for result in results:
        if result.name == "driver-hidden":
            result.rejection = gate_rejection(captured(result.name), "vulkan", "40")
    winner = decide(results, RECORD["depths"])
    assert winner is not None and winner.name == "vulkan-ngl-99"
    assert winner.runtime == RECORD["winner"]
    assert [(r.name, r.verdict, r.reason) for r in results] == [
        (c["name"], c["verdict"], c["reason"]) for c in RECORD["candidates"]
    ]
    # Every layer on the GPU beats the stack's -ngl 40 at every depth by more than the spread.
    current, best = results[0], results[1]
    for depth in RECORD["depths"]:
        mine, theirs = best.decode(depth), current.decode(depth)
        assert mine is not None and theirs is not None
        assert (mine.median or 0) - (theirs.median or 0) > max(mine.spread or 0, theirs.spread or 0)


@pytest.mark.parametrize("name", sorted(GPU_LAYERS))
def test_the_gate_passes_each_measured_candidates_real_load(name: str) -> None:
    text = captured(name)
    assert "Vulkan0 model buffer size" in text
    assert gate_rejection(text, "vulkan", GPU_LAYERS[name]) is None


def test_the_gate_rejects_the_hidden_driver_from_its_own_output() -> None:
    reason = gate_rejection(captured("driver-hidden"), "vulkan", "40")
    recorded = next(c for c in RECORD["candidates"] if c["name"] == "driver-hidden")
    assert recorded["verdict"] == REJECTED and recorded["figures"] == []
    assert reason == recorded["reason"]
    assert reason is not None and "no usable GPU found" in reason
