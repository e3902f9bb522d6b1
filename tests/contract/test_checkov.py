"""checkov (kubernetes) on the rendered Strix Halo manifests: clean, every skip explained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.llamacpp.manifests import MODEL_ANNOTATION
from tests.conftest import ROOT
from tests.support.checkov import PINNED_TAG_SKIPS, PRIVILEGED_SKIPS, checkov, findings
from tests.support.render import STACK_FILE, render


def rendered(tmp_path: Path, old: str = "", new: str = "") -> Path:
    stack = tmp_path / "Pulumi.variant.yaml"
    stack.write_text(STACK_FILE.read_text().replace(old, new) if old else STACK_FILE.read_text())
    out = tmp_path / "out"
    result = render(str(stack), out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return out / "manifests.yaml"


def test_privileged_mode_has_no_finding_but_the_explained_skips(tmp_path: Path) -> None:
    report = checkov(rendered(tmp_path))
    assert findings(report, "failed_checks") == set()
    skipped = {check for check, _ in findings(report, "skipped_checks")}
    assert skipped == PINNED_TAG_SKIPS | PRIVILEGED_SKIPS
    assert report["summary"]["failed"] == 0 and report["summary"]["resource_count"] >= 8
    for check in report["results"]["skipped_checks"]:
        assert len(check["check_result"]["suppress_comment"]) > 20, check["check_id"]


def test_device_plugin_mode_needs_no_privilege_skips(tmp_path: Path) -> None:
    manifests = rendered(
        tmp_path, "    gpuLayers: 40\n", "    gpuLayers: 40\n    gpuAccess: device-plugin\n"
    )
    report = checkov(manifests)
    assert findings(report, "failed_checks") == set()
    assert {check for check, _ in findings(report, "skipped_checks")} == PINNED_TAG_SKIPS


def test_a_rocm_runtime_has_the_privileged_skips_and_a_cpu_runtime_none(tmp_path: Path) -> None:
    (tmp_path / "rocm").mkdir()
    server = "  llm-infra:server:\n"
    rocm = checkov(rendered(tmp_path / "rocm", server, f"{server}    runtime: rocm\n"))
    assert findings(rocm, "failed_checks") == set()
    assert {check for check, _ in findings(rocm, "skipped_checks")} == (
        PINNED_TAG_SKIPS | PRIVILEGED_SKIPS
    )
    reasons = [c["check_result"]["suppress_comment"] for c in rocm["results"]["skipped_checks"]]
    assert any(r.startswith("ROCm reaches /dev/kfd and /dev/dri only privileged") for r in reasons)
    stack = STACK_FILE.read_text().replace("gpuLayers: 40", "gpuLayers: 0\n    runtime: cpu")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "Pulumi.variant.yaml").write_text(
        stack.replace("memory: 20Gi", "memory: 110Gi")
    )
    result = render(str(tmp_path / "cpu" / "Pulumi.variant.yaml"), tmp_path / "cpu" / "out")
    assert result.returncode == 0, result.stderr
    cpu = checkov(tmp_path / "cpu" / "out" / "manifests.yaml")
    assert findings(cpu, "failed_checks") == set()
    assert {check for check, _ in findings(cpu, "skipped_checks")} == PINNED_TAG_SKIPS


def test_an_unexplained_finding_fails(tmp_path: Path) -> None:
    manifests = rendered(tmp_path)
    documents = list(yaml.safe_load_all(manifests.read_text()))
    for document in documents:
        document["metadata"].pop("annotations", None)
    manifests.write_text(yaml.safe_dump_all(documents))
    failed = {check for check, _ in findings(checkov(manifests), "failed_checks")}
    assert failed >= PRIVILEGED_SKIPS


@pytest.mark.parametrize("kind", ["Job", "Deployment"])
def test_skips_are_annotations_on_the_objects_themselves(tmp_path: Path, kind: str) -> None:
    documents = yaml.safe_load_all(rendered(tmp_path).read_text())
    document = next(d for d in documents if d["kind"] == kind)
    annotations = document["metadata"]["annotations"]
    skips = {k: v for k, v in annotations.items() if k.startswith("checkov.io/skip")}
    # Besides its skips, the server names the model it serves, and with store.upgrade: replace
    # `up` does not wait for its pod (the fetch waits for the old one to be gone).
    assert set(annotations) - set(skips) <= {MODEL_ANNOTATION, "pulumi.com/skipAwait"}
    assert skips and all("=" in value for value in skips.values())


DRAFT = """    speculative:
      method: draft-dspark
      numSpeculativeTokens: 4
      draft:
        repo: unsloth/DeepSeek-V4-Flash-0731-GGUF
        files: [DSpark/DeepSeek-V4-Flash-0731-DSpark-Q8_0.gguf]
        sizeGib: 1.5
"""


def test_a_speculative_draft_adds_no_finding(tmp_path: Path) -> None:
    """The draft's fetch container and its check are held to the model's: same findings."""
    manifests = rendered(tmp_path, "    gpuLayers: 40\n", "    gpuLayers: 40\n" + DRAFT)
    assert "fetch-draft" in manifests.read_text() and "draft-check" in manifests.read_text()
    report = checkov(manifests)
    assert findings(report, "failed_checks") == set()
    skipped = {check for check, _ in findings(report, "skipped_checks")}
    assert skipped == PINNED_TAG_SKIPS | PRIVILEGED_SKIPS


def test_the_node_port_service_has_no_finding(tmp_path: Path) -> None:
    manifests = rendered(
        tmp_path,
        "  llm-infra:metrics:\n",
        "  llm-infra:network:\n    nodePort: 30080\n    allowCidrs: [192.168.1.0/24]\n"
        "  llm-infra:metrics:\n",
    )
    kinds = [d["kind"] for d in yaml.safe_load_all(manifests.read_text())]
    assert kinds.count("Service") == 2
    report = checkov(manifests)
    assert findings(report, "failed_checks") == set()
    assert {check for check, _ in findings(report, "skipped_checks")} == (
        PINNED_TAG_SKIPS | PRIVILEGED_SKIPS
    )
