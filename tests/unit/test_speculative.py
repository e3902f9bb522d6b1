"""Speculative decoding for llama.cpp: `server.speculative` checked and rendered, the plan's
rollback planes, verify's identity-only positions, the gate's draft check (the probe's shell and
the Python gate agree) and impossible draft figures refused.

The gate's logs join a real Vulkan load of the 43-layer model (tests/fixtures/gpu_gate/) with a
real draft load of the CPU build (tests/fixtures/speculative/: b11434 prints the same lines,
`offloaded N/M layers to GPU` included); no draft has been loaded on a GPU machine yet, so the
draft's buffer is renamed to the device's where a case puts it there.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from components.llamacpp.gate import probe_shell
from components.payloads import gpu_gate
from components.payloads.tune_figures import CandidateResult, figures_problem
from components.payloads.tune_measure import DepthFigures
from components.payloads.verify import TokenStep, compare_steps
from infra.config import ConfigError
from infra.config.kubernetes import speculative_structure_problems
from infra.config.server import LlamaSpeculativeSettings
from infra.lock_format import ModelLock
from infra.targets.registry import stack_plan
from tests.conftest import problems_of, strix, unlocked_source

FIXTURES = Path(__file__).parents[1] / "fixtures"
TARGET = (FIXTURES / "gpu_gate" / "llama43-gpu.load.log").read_text()
DRAFT_RUN = (FIXTURES / "speculative" / "cpu-draft-simple.load.log").read_text()
_AT = DRAFT_RUN.rindex("\n", 0, DRAFT_RUN.index("loading draft model")) + 1
DRAFT = DRAFT_RUN[_AT : DRAFT_RUN.index("speculative decoding context initialized")]
"""The CPU run's draft load: from its `loading draft model` line up to the server's next step."""


def joined(draft: str) -> str:
    """The target's real Vulkan load, then a draft's load, then the server's last lines."""
    head, _, tail = TARGET.partition("srv  llama_server: listening")
    lines = head.splitlines(keepends=True)
    return "".join(lines[:-1]) + draft + lines[-1] + "srv  llama_server: listening" + tail


ON_GPU = DRAFT.replace("CPU_Mapped model buffer size", "Vulkan0 model buffer size")


def probe(log: str, tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "load.log"
    path.write_text(log)
    run = subprocess.run(
        ["sh", "-c", probe_shell(str(path), 40, "Vulkan", draft=True)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return run.returncode, run.stdout


@pytest.mark.parametrize(
    ("name", "log", "passes"),
    [
        ("draft on the GPU", joined(ON_GPU), True),
        ("draft on the CPU", joined(DRAFT), False),
        (
            "2 of the draft's 3 layers",
            joined(ON_GPU.replace("offloaded 3/3", "offloaded 2/3")),
            False,
        ),
        ("no draft loaded", TARGET, False),
    ],
)
def test_the_probe_and_the_gate_judge_the_draft_alike(
    name: str, log: str, passes: bool, tmp_path: Path
) -> None:
    code, out = probe(log, tmp_path)
    result = gpu_gate.check_log(log, 40, device_prefix="Vulkan")
    if name == "no draft loaded":
        # The Python gate reads a log; only the probe knows a draft was configured.
        assert result.ok and code == 1 and "was not loaded" in out, out
        return
    assert (code == 0, result.ok) == (passes, passes), (out, result.problems)
    if not passes:
        assert "speculative draft" in out and "speculative draft" in result.problems[0], out
    # The target's evidence stays the target's: its 40 of 44 layers.
    assert (result.evidence.offloaded, result.evidence.offloadable) == (40, 44)


def step(token: str, logprob: float, *top: tuple[str, float]) -> TokenStep:
    return TokenStep(token, logprob, list(top))


def test_a_drafted_token_without_probabilities_is_compared_by_identity_only() -> None:
    reference = [step("a", -1.0, ("a", -1.0), ("b", -3.0)), step("c", -0.5, ("c", -0.5))]
    # As llama-server b11434 reports a drafted token the target accepted: 0.0 and no list.
    drafted = [step("a", -1.0, ("a", -1.0), ("b", -3.0)), step("c", 0.0)]
    same = compare_steps(reference, drafted)
    assert (same.compared, same.unscored, same.max_logprob_delta) == (2, 1, 0.0)
    assert same.divergence is None
    wrong = compare_steps(reference, [drafted[0], step("x", 0.0)])
    assert wrong.divergence is not None and wrong.divergence.position == 1


def with_spec(values: dict[str, Any], **spec: Any) -> dict[str, Any]:
    values["server"]["speculative"] = spec
    return values


def test_deepseek4_refuses_a_method_b11434_does_not_load_for_it(
    strix_halo_values: dict[str, Any],
) -> None:
    problems = problems_of(with_spec(strix_halo_values, method="draft-eagle3"))
    assert any(
        p.startswith("server.speculative.method: 'draft-eagle3' does not load for deepseek4")
        and "allowed: draft-mtp, draft-dspark, ngram-" in p
        for p in problems
    ), problems


def test_an_ngram_method_takes_no_draft_sizes(strix_halo_values: dict[str, Any]) -> None:
    problems = problems_of(with_spec(strix_halo_values, method="ngram-mod", numSpeculativeTokens=4))
    assert any(
        p.startswith("server.speculative.numSpeculativeTokens: applies to the draft")
        for p in problems
    )


def test_speculation_flags_in_extra_args_point_to_the_key(
    strix_halo_values: dict[str, Any],
) -> None:
    strix_halo_values["server"]["extraArgs"] = ["--spec-type", "draft-mtp"]
    problems = problems_of(strix_halo_values)
    assert any("is rendered from server.speculative" in p for p in problems), problems


def test_mtp_needs_nextn_layers_in_the_locked_header() -> None:
    spec = LlamaSpeculativeSettings(method="draft-mtp")
    without = {"deepseek4.block_count": 43}
    assert speculative_structure_problems(spec, "deepseek4", None) == []
    assert "has none" in speculative_structure_problems(spec, "deepseek4", without)[0]
    with_mtp = {**without, "deepseek4.nextn_predict_layers": 1}
    assert speculative_structure_problems(spec, "deepseek4", with_mtp) == []


def test_mtp_renders_its_flags_and_the_plan_counts_its_rollback_planes(
    strix_halo_values: dict[str, Any],
) -> None:
    plain = strix(strix_halo_values)
    spec = strix(with_spec(strix_halo_values, method="draft-mtp", numSpeculativeTokens=4))
    kv = [
        sum(d.items.get("kv_cache", 0) for d in stack_plan(s, unlocked_source(s)).devices.values())
        for s in (plain, spec)
    ]
    assert kv[1] > kv[0], kv
    plan = stack_plan(spec, unlocked_source(spec))
    assert any("draft-mtp" in line and "4 rollback planes" in line for line in plan.assumptions)


def test_more_draft_tokens_accepted_than_drafted_is_an_impossible_figure() -> None:
    figures = DepthFigures(depth=0, drafted=[10], accepted=[11])
    problem = figures_problem(CandidateResult("spec", {}, depths=[figures]))
    assert problem is not None and "draft figures" in problem


DRAFT_MODEL = {"repo": "unsloth/DeepSeek-V4-Flash-0731-GGUF", "files": ["DSpark/d.gguf"]}


def test_a_draft_method_needs_a_draft_and_the_others_refuse_one(
    strix_halo_values: dict[str, Any],
) -> None:
    problems = problems_of(with_spec(copy.deepcopy(strix_halo_values), method="draft-dspark"))
    assert any(
        p.startswith("server.speculative.draft: 'draft-dspark' drafts with a model of its own: "
                     "set server.speculative.draft") for p in problems
    ), problems  # fmt: skip
    problems = problems_of(with_spec(strix_halo_values, method="draft-mtp", draft=DRAFT_MODEL))
    assert any(
        p.startswith("server.speculative.draft: 'draft-mtp' drafts with the model's own MTP")
        for p in problems
    ), problems


def test_an_unlocked_draft_needs_its_size_for_the_plan(strix_halo_values: dict[str, Any]) -> None:
    stack = strix(with_spec(strix_halo_values, method="draft-dspark", draft=DRAFT_MODEL))
    with pytest.raises(ConfigError) as caught:
        stack_plan(stack, unlocked_source(stack))
    assert caught.value.problems[0].startswith("server.speculative.draft.sizeGib: required")
    sized = strix(
        with_spec(strix_halo_values, method="draft-dspark", draft={**DRAFT_MODEL, "sizeGib": 2})
    )
    vram = stack_plan(sized, unlocked_source(sized)).devices["vram"]
    assert vram.items["draft"] == 2 * 2**30


def test_a_drafts_lock_holds_no_draft_of_its_own() -> None:
    one = {
        "version": 1, "repo": "a/b", "revision": "0" * 40, "requested_revision": "main",
        "patterns": ["m.gguf"],
        "files": [{"path": "m.gguf", "name": "m.gguf", "size": 1, "sha256": "0" * 64}],
    }  # fmt: skip
    assert ModelLock.model_validate({**one, "draft": one}).draft is not None
    with pytest.raises(ValidationError, match="a draft's lock holds no draft of its own"):
        ModelLock.model_validate({**one, "draft": {**one, "draft": one}})
