"""Tune records as `llm-infra tune` writes them: the bake-off's own decision and record
(`components/payloads/tune_figures.py`) over made-up figures, so that the reader's tests read
exactly what the writer writes."""

from __future__ import annotations

from typing import Any

from components.payloads.tune_figures import CandidateResult, decide, tune_record
from components.payloads.tune_measure import DepthFigures, Series


def written_record(
    winner: dict[str, Any],
    current: dict[str, Any],
    *,
    stack: str = "strix-halo",
    server: str | None = None,
) -> dict[str, Any]:
    """The record of a bake-off in which `winner` decodes at 16 tok/s and `current` at 9."""
    results = []
    for runtime, speed, is_current in ((current, 9.0, True), (winner, 16.0, False)):
        result = CandidateResult(str(runtime["name"]), runtime, current=is_current)
        result.depths.append(
            DepthFigures(depth=0, decode_server=Series([speed, speed + 0.1, speed - 0.1]))
        )
        results.append(result)
    chosen = decide(results, [0])
    return tune_record(stack, server, results, chosen, depths=[0], runs=3, where="local")
