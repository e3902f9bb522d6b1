"""Speculative decoding on real llama-server b11434 (CPU build, random-weight models): the flags
`flags.speculative` renders start a server that drafts with the draft model, answers what the
same server answers without a draft (greedy: verify's rule passes), and reports its drafted and
accepted tokens to tune's measurement; the gate reads the target's load and the draft's apart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from components.llamacpp.manifests import speculative_args
from components.payloads import gpu_gate, verify
from components.payloads.tune_measure import measure_depth
from infra.config.base import RepoModelSettings
from infra.lock import ModelSource
from infra.plan.deepseek4 import attention_shape
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights
from infra.plan.stack import draft_plan
from tests.conftest import ROOT
from tests.support import llama_build
from tests.support.llama_server import run_llama_server, tiny_server_argv
from tests.support.tiny_gguf import header_summary, write_tiny_model_seeded
from tests.support.verify_models import SMALL_F16, with_random_model_tolerance

SEED = 211
DRAFT_LAYERS = 2


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("spec")
    return {
        "target": write_tiny_model_seeded(root / "t", "t", 1, SMALL_F16, seed=SEED)[0],
        # The target's own first layers, embeddings and output: a draft of the same vocab.
        "draft": write_tiny_model_seeded(
            root / "d", "d", 1, SMALL_F16, seed=SEED, keep_layers=DRAFT_LAYERS
        )[0],
        # The target as its own draft: every proposal is the target's own greedy token.
        "self": write_tiny_model_seeded(root / "s", "s", 1, SMALL_F16, seed=SEED)[0],
    }


def argv(model: Path, *extra: str) -> list[str]:
    return tiny_server_argv(model, "--threads", "1", *extra, parallel=1)


def draft_argv(models: dict[str, Path], draft: str, log: Path) -> list[str]:
    spec: Any = {
        "method": "draft-simple",
        "num_speculative_tokens": 4,
        "draft_model_path": str(models[draft]),
    }
    return argv(models["target"], "-lv", "4", "--log-file", str(log), *speculative_args(spec))


@pytest.fixture(scope="module")
def reference(models: dict[str, Path]) -> dict[str, Any]:
    with run_llama_server(argv(models["target"])) as url:
        return verify.record(url, with_random_model_tolerance(verify.new_expectations()))


@pytest.mark.parametrize("draft", ["draft", "self"])
def test_greedy_speculation_answers_what_the_target_alone_answers(
    models: dict[str, Path], reference: dict[str, Any], draft: str, tmp_path: Path
) -> None:
    with run_llama_server(draft_argv(models, draft, tmp_path / "load.log")) as url:
        results = verify.verify(url, reference)
        figures = measure_depth(url, 0, runs=1, prefill_tokens=32, decode_tokens=16)
        greedy = verify.request_json(
            url, "/completion", {"prompt": "count: 1 2 3", "n_predict": 24, "temperature": 0}
        )["timings"]
    assert all(r.ok for r in results), verify.format_table(results)
    assert verify.evidence_problem(results, verify.tolerance_of(reference)) is None
    # tune's measurement (the server's own sampling, temperature 0.8 here) records the draft.
    assert figures.drafted and figures.drafted[0] > 0, figures
    assert figures.acceptance is not None and 0 <= figures.acceptance <= 1
    if draft == "self":
        # Greedy, its own draft proposes exactly the target's tokens: nearly all accepted.
        assert greedy["draft_n_accepted"] > 0.9 * greedy["draft_n"], greedy


def test_the_gate_reads_the_targets_load_and_the_drafts_apart(
    models: dict[str, Path], tmp_path: Path
) -> None:
    log = tmp_path / "load.log"
    with run_llama_server(draft_argv(models, "draft", log)):
        text = log.read_text()
    evidence = gpu_gate.parse_load_log(text)
    assert evidence.draft is not None
    assert (evidence.offloadable, evidence.draft.offloadable) == (
        SMALL_F16.n_layer + 1,
        DRAFT_LAYERS + 1,
    )
    assert evidence.host_buffers_mib and evidence.draft.host_buffers_mib
    # The plan's draft KV cache (f16, the target's context) is the one llama-server allocated.
    target = header_summary([models["target"]])
    planned = draft_plan(
        LlamaCppPlanInputs(
            weights=ModelWeights.from_summary(target, "GGUF header"),
            attention=attention_shape("llama", target["metadata"], target.get("vocab_size")),
            gpu_layers=0,
            ctx_size=2048,
            parallel=1,
            cache_type_k="q8_0",
            cache_type_v="q8_0",
            vram_bytes=None,
            memory_limit_bytes=2**30,
        ),
        RepoModelSettings(repo="a/draft", files=["d.gguf"]),
        ModelSource(
            revision="0" * 40,
            files=[{"path": "d.gguf", "name": "d.gguf", "size": models["draft"].stat().st_size}],
            locked=True,
            gguf=header_summary([models["draft"]]),
        ),
    )
    assert planned.kv_bytes == sum(evidence.draft.kv_buffers_mib.values()) * 2**20
    # The draft's buffers are its own, not added to the target's.
    assert sum(evidence.draft.host_buffers_mib.values()) < sum(evidence.host_buffers_mib.values())


def test_tune_takes_speculation_as_a_candidate(
    models: dict[str, Path], reference: dict[str, Any], tmp_path: Path
) -> None:
    """`llm-infra tune --local` with the target alone and with its own first layers as the
    draft: both pass the gate and verify (greedy speculation changes no answer), the draft's
    proposals and acceptances are kept per run, and the table prints the acceptance."""
    server = str(llama_build.binary("llama-server"))
    cpu = {"GGML_BACKEND_PATH": str(llama_build.variant_library(llama_build.default_variant()))}
    on_cpu = {"-ngl": "0", "--threads": "1"}
    runtime = {"name": "cpu", "image": "example.org/llama:cpu-b11434", "backend": "cpu"}
    spec: Any = {"method": "draft-simple", "num_speculative_tokens": 4,
                 "draft_model_path": str(models["draft"])}  # fmt: skip
    words = speculative_args(spec)
    with_draft = dict(zip(words[::2], words[1::2], strict=True))
    candidates = [
        {"name": "alone", "current": True, "runtime": runtime, "command": [server], "env": cpu,
         "setArgs": on_cpu},
        {"name": "spec-draft", "runtime": {**runtime, "name": "cpu-spec"}, "command": [server],
         "env": cpu, "setArgs": {**on_cpu, **with_draft}},
    ]  # fmt: skip
    path = tmp_path / "candidates.json"
    path.write_text(json.dumps(candidates))
    expect = tmp_path / "expect.json"
    # Recorded on another server's settings: its speed is not this run's to meet.
    expect.write_text(
        json.dumps(
            {**reference, "tolerance": {**reference["tolerance"], "min_decode_fraction": 0.0}}
        )
    )
    out = tmp_path / "strix-halo.tune.json"
    result = subprocess.run(
        [sys.executable, "-m", "infra.cli", "tune", "strix-halo", "--local", str(path),
         "--model", str(models["target"]), "--expect", str(expect), "--depths", "0",
         "--prefill-tokens", "32",
         "--decode-tokens", "16", "--output-file", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    record = {c["name"]: c for c in json.loads(out.read_text())["candidates"]}
    assert record["spec-draft"]["verdict"] != "rejected", record["spec-draft"]["reason"]
    (figures,) = record["spec-draft"]["figures"]
    assert len(figures["draftedTokens"]) == 3 and sum(figures["draftedTokens"]) > 0, figures
    assert "draftedTokens" not in record["alone"]["figures"][0]
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("spec-draft")]
    assert "(draft accepted " in row, result.stdout
