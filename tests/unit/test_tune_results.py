"""The bake-off's results travel on the runner's own line: a line that starts with the prefix
and the run's nonce, split at newlines only, one per candidate. Nothing a server printed (its
model's chat template, an error the runner quotes) can write or replace a result. A server
whose memory fit gives up ran out of memory, whatever ends it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components.payloads import tune_local
from components.payloads.tune_figures import OUT_OF_MEMORY, CandidateResult
from components.payloads.tune_job import RESULT_PREFIX, result_line, results_in_log
from components.payloads.tune_measure import DepthFigures, Series
from tests.conftest import ROOT

NONCE = "0123456789abcdef0123456789abcdef"
RUNTIME: dict[str, Any] = {
    "name": "vulkan", "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
    "backend": "vulkan", "capabilities": [], "digest": None,
}  # fmt: skip


def candidate(name: str, decode: float, rejection: str | None = None) -> CandidateResult:
    result = CandidateResult(name, {**RUNTIME, "name": name}, current=name == "vulkan")
    result.rejection = rejection
    result.depths.append(DepthFigures(depth=0, decode_server=Series([decode] * 3)))
    return result


def forged_json(name: str) -> str:
    return json.dumps({**candidate(name, 9e9).to_json(), "rejection": None}, sort_keys=True)


@pytest.mark.parametrize(
    "forgery",
    [
        # Quoted inside the runner's own error line (the load log's text), as before.
        "tune: rocm: crashed during load: ... {prefix}{nonce} {json}",
        # Behind separators that str.splitlines() would split at.
        "x\r{prefix}{nonce} {json}",
        "x\x1c{prefix}{nonce} {json}",
        "x\x85{prefix}{nonce} {json}",
        "x\u2028{prefix}{nonce} {json}",
        # At the start of a line, without the run's nonce or with another.
        "{prefix}{json}",
        "{prefix}ffffffffffffffffffffffffffffffff {json}",
    ],
    ids=["quoted", "cr", "record-separator", "nel", "u2028", "no-nonce", "other-nonce"],
)
def test_a_forged_result_in_the_log_changes_nothing(forgery: str) -> None:
    real = candidate("rocm", 12.0, rejection="crashed during load (exit code 134)")
    line = forgery.format(prefix=RESULT_PREFIX, nonce=NONCE, json=forged_json("rocm"))
    log = "\n".join([line, result_line(NONCE, real), line]) + "\n"
    (found,) = results_in_log(log, NONCE)
    assert found.rejection == real.rejection
    assert [d.decode_server.values for d in found.depths] == [[12.0] * 3]


def test_two_result_lines_for_one_candidate_are_an_error() -> None:
    line = result_line(NONCE, candidate("vulkan", 9.0))
    with pytest.raises(ValueError, match="two result lines for the candidate 'vulkan'"):
        results_in_log(f"{line}\n{line}\n", NONCE)


def test_a_result_naming_a_path_is_refused() -> None:
    line = result_line(NONCE, candidate("vulkan", 9.0)).replace(
        '"name": "vulkan"', '"name": "../x"'
    )
    with pytest.raises(ValueError, match="is not a candidate name"):
        results_in_log(line, NONCE)


FIT_LOG = ROOT / "tests" / "fixtures" / "tune" / "fit" / "cpu-c60000000.log"


@pytest.mark.parametrize("end", ["abort", "kill"])
def test_a_server_whose_memory_fit_gives_up_ran_out_of_memory(tmp_path: Path, end: str) -> None:
    # llama-server's real log of a -c its memory fit cannot place, then the process's end: an
    # abort (SIGABRT, as on the GPU machine) or the OOM killer's SIGKILL.
    out, log = tmp_path / "server.out", tmp_path / "server.log"
    out.write_text(FIT_LOG.read_text())
    die = "os.abort()" if end == "abort" else "os.kill(os.getpid(), 9)"
    process = subprocess.Popen([sys.executable, "-c", f"import os; {die}"])
    process.wait()
    said = tune_local._died(process, out, log, "while loading")
    assert said.startswith(f"{OUT_OF_MEMORY} while loading (failed to fit params"), said
