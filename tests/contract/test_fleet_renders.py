"""The fleet renders against real tools: kubernetes-validate --strict, checkov, the policy pack."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from policy import validators
from tests.conftest import ROOT
from tests.support.checkov import PINNED_TAG_SKIPS, PRIVILEGED_SKIPS, checkov, findings
from tests.support.kubernetes_validate import K8S_VERSION
from tests.support.render import FLEET_STACKS, render

NO_PROBE_SKIPS = {"CKV_K8S_8", "CKV_K8S_9"}


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fleet")
    for stack in FLEET_STACKS:
        assert render(stack, base / stack, cwd=ROOT).returncode == 0
    return {stack: base / stack for stack in FLEET_STACKS}


@pytest.mark.parametrize("stack", FLEET_STACKS)
def test_fleet_manifests_pass_strict_validation(renders: dict[str, Path], stack: str) -> None:
    tool = shutil.which("kubernetes-validate")
    assert tool, "kubernetes-validate is not installed (pip install -e '.[test]')"
    manifests = renders[stack] / "manifests.yaml"
    result = subprocess.run(
        [tool, "--strict", "-k", K8S_VERSION, str(manifests)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    documents = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
    assert result.stdout.count("passed for resource") == len(documents) > 8


@pytest.mark.parametrize("stack", FLEET_STACKS)
def test_fleet_manifests_have_no_checkov_finding_but_the_explained_skips(
    renders: dict[str, Path], stack: str
) -> None:
    report = checkov(renders[stack] / "manifests.yaml")
    assert findings(report, "failed_checks") == set()
    skipped = findings(report, "skipped_checks")
    assert {check for check, _ in skipped} <= PINNED_TAG_SKIPS | PRIVILEGED_SKIPS | NO_PROBE_SKIPS
    # Only the rpc-server workers go without probes (they serve one client: the head).
    workers = {"strix-halo-pair": set(), "strix-halo-pair-split": {"deepseek-v4-flash-0731-rpc-0"}}
    without_probes = {resource for check, resource in skipped if check in NO_PROBE_SKIPS}
    assert without_probes == {f"Deployment.llm.{name}" for name in workers[stack]}
    for check in report["results"]["skipped_checks"]:
        assert len(check["check_result"]["suppress_comment"]) > 20, check["check_id"]


@pytest.mark.parametrize("stack", FLEET_STACKS)
def test_fleet_renders_pass_every_policy(renders: dict[str, Path], stack: str) -> None:
    assert validators.check_render(renders[stack]) == []
    assert validators.main([str(renders[stack])]) == 0
