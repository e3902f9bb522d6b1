"""`llm-infra tune` with real candidates: the real llama-server b11434 of the pinned build,
started with the strix-halo stack's rendered flags on a small model, once per candidate.

The candidates differ for real: thread counts (the same numbers, other speeds), a RoPE base
that changes the answers (verify rejects it), the stock build without a GPU while the stack asks
for layers on one (the gate rejects the CPU fallback), the server aborted when its first request
starts decoding (as a build whose kernels crash there), and a context whose KV cache cannot be
allocated (out of memory).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import jsonschema
import pytest

from components.payloads import tune_local
from infra.cli.tune import server_argv
from infra.config import read_stack_file
from infra.tune import load_tune_record
from tests.conftest import ROOT
from tests.support import llama_build
from tests.support.llama_server import free_port
from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model_seeded

SPEC = TinyLlamaSpec(
    n_layer=4, n_embd=512, n_head=8, n_head_kv=8, n_ff=1024,
    weight_type=gguf.GGMLQuantizationType.Q8_0,
)  # fmt: skip
ABORT_WRAPPER = ROOT / "tests" / "support" / "abort_at_first_decode.py"


def runtime(name: str, backend: str = "cpu") -> dict[str, Any]:
    return {"name": name, "image": f"example.org/llama:{name}-b11434", "backend": backend,
            "capabilities": []}  # fmt: skip


@pytest.fixture(scope="module")
def bake_off(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    root = tmp_path_factory.mktemp("tune")
    model = write_tiny_model_seeded(root / "model", "mid", 1, SPEC, seed=1)[0]
    server = str(llama_build.binary("llama-server"))
    cpu = {"GGML_BACKEND_PATH": str(llama_build.variant_library(llama_build.default_variant()))}
    on_cpu = {"-ngl": "0", "--threads": "2"}
    candidates = [
        {"name": "threads-1", "current": True, "runtime": runtime("threads-1"),
         "command": [server], "env": cpu, "setArgs": {**on_cpu, "--threads": "1"}},
        {"name": "threads-2", "runtime": runtime("threads-2"), "command": [server], "env": cpu,
         "setArgs": on_cpu},
        {"name": "other-rope", "runtime": runtime("other-rope"), "command": [server], "env": cpu,
         "setArgs": {**on_cpu, "--rope-freq-base": "10"}},
        {"name": "no-gpu", "runtime": runtime("vulkan", "vulkan"),
         "command": [str(llama_build.stock_llama_server())], "env": cpu,
         "setArgs": {"--threads": "2"}},
        {"name": "aborts", "runtime": runtime("aborts"),
         "command": [sys.executable, str(ABORT_WRAPPER), server], "env": cpu, "setArgs": on_cpu},
        {"name": "too-long", "runtime": runtime("too-long"), "command": [server], "env": cpu,
         "setArgs": {**on_cpu, "-c": "100000000", "-fit": "off"}},
    ]  # fmt: skip
    candidates_path = root / "candidates.json"
    candidates_path.write_text(json.dumps(candidates))
    # The stack's expectations, recorded once against the current runtime with the stack's flags.
    stack_args = server_argv(read_stack_file("strix-halo"), None)
    current = tune_local.load_candidates(candidates_path)[0]
    doc = tune_local.record_expectations(
        current, stack_args, model=model, port=free_port(), log=root / "record.log"
    )
    # Recorded and checked on one busy CPU, a tiny model's speed says nothing about a fallback
    # (test_verify has that check): the candidates are judged on their answers.
    doc["tolerance"]["min_decode_fraction"] = 0.0
    expect = root / "expect.json"
    expect.write_text(json.dumps(doc))
    out = root / "strix-halo.tune.json"
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "tune", "strix-halo", "--local", str(candidates_path),
         "--model", str(model), "--expect", str(expect), "--depths", "0,512",
         "--prefill-tokens", "64", "--decode-tokens", "16", "--output-file", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text()), result.stdout


def by_name(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in record["candidates"]}


def test_every_candidate_that_passes_is_measured_three_times_at_each_depth(
    bake_off: tuple[dict[str, Any], str],
) -> None:
    record, _ = bake_off
    schema = json.loads((ROOT / "docs" / "json" / "tune.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(record)
    assert record["depths"] == [0, 512] and record["runs"] == 3
    for name in ("threads-1", "threads-2"):
        figures = by_name(record)[name]["figures"]
        assert [f["depth"] for f in figures] == [0, 512]
        for f in figures:
            assert len(f["decodeTokSServer"]["runs"]) == 3 and f["decodeTokSServer"]["median"] > 0
            assert len(f["prefillTokS"]["runs"]) == 3
        # At depth 512 the server reused the 512-token prefix: only the new tokens were prefilled.
        assert figures[1]["cachedTokens"] == [512, 512, 512]


def test_the_winner_follows_the_rule_on_the_recorded_figures(
    bake_off: tuple[dict[str, Any], str],
) -> None:
    record, _ = bake_off
    candidates = by_name(record)
    current, challenger = candidates["threads-1"], candidates["threads-2"]

    def beats(a: dict[str, Any], b: dict[str, Any]) -> bool:
        for fa, fb in zip(a["figures"], b["figures"], strict=True):
            sa, sb = fa["decodeTokSServer"], fb["decodeTokSServer"]
            if sa["median"] - sb["median"] <= max(sa["spread"], sb["spread"]):
                return False
        return True

    if beats(challenger, current):
        assert record["winner"]["name"] == "threads-2" and challenger["verdict"] == "winner"
    else:
        assert record["winner"]["name"] == "threads-1" and current["verdict"] == "kept"
        assert "not faster by more than the spread" in challenger["reason"]


def test_the_record_reads_back_as_the_runtime_server_runtime_tuned_renders(
    bake_off: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    record, _ = bake_off
    path = tmp_path / "strix-halo.tune.json"
    path.write_text(json.dumps(record))
    winner = load_tune_record(path, "strix-halo", None)
    assert winner.to_record() == record["winner"]
    assert winner.name in {"threads-1", "threads-2"} and winner.backend == "cpu"


def test_each_broken_candidate_is_rejected_with_its_reason(
    bake_off: tuple[dict[str, Any], str],
) -> None:
    candidates = by_name(bake_off[0])
    assert {n for n, c in candidates.items() if c["verdict"] == "rejected"} == {
        "other-rope", "no-gpu", "aborts", "too-long",
    }  # fmt: skip
    assert candidates["other-rope"]["reason"].startswith("failed verify: ")
    assert candidates["no-gpu"]["reason"].startswith(
        "failed the gate: llama-server printed 'warning: no usable GPU found"
    )
    assert candidates["aborts"]["reason"].startswith("crashed at the first decode (exit code 134)")
    assert candidates["too-long"]["reason"].startswith("ran out of memory while loading")


def test_the_table_lists_every_candidate_and_the_winner(
    bake_off: tuple[dict[str, Any], str],
) -> None:
    record, stdout = bake_off
    for name in by_name(record):
        assert any(line.startswith(name) for line in stdout.splitlines()), stdout
    assert f"winner: {record['winner']['name']}" in stdout
