"""Every rendered manifest passes `kubernetes-validate --strict` for Kubernetes 1.32."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.kubernetes_validate import K8S_VERSION
from tests.support.render import render


def kubernetes_validate(path: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("kubernetes-validate")
    assert tool, "kubernetes-validate is not installed (pip install -e '.[test]')"
    return subprocess.run(
        [tool, "--strict", "-k", K8S_VERSION, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_rendered_strix_halo_manifests_pass_strict_validation(tmp_path: Path) -> None:
    out = tmp_path / "strix-halo"
    assert render("strix-halo", out, cwd=ROOT).returncode == 0
    result = kubernetes_validate(out / "manifests.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    documents = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    # prometheus-operator's kinds have no schema in Kubernetes itself (the operator's CRD
    # schemas check them in test_operator_objects, and promtool their rules in
    # test_alert_rules); every core object passes strictly.
    custom = [d for d in documents if d["apiVersion"] == "monitoring.coreos.com/v1"]
    assert sorted(d["kind"] for d in custom) == ["PrometheusRule", "ServiceMonitor"]
    assert result.stdout.count("passed for resource") == len(documents) - len(custom) == 10
    output = result.stdout + result.stderr
    assert output.count("Couldn't find schema for kind") == len(custom)


def test_strict_validation_rejects_an_unknown_field(tmp_path: Path) -> None:
    out = tmp_path / "strix-halo"
    assert render("strix-halo", out, cwd=ROOT).returncode == 0
    documents = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["gpuLayers"] = 40
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(deployment))
    result = kubernetes_validate(broken)
    assert result.returncode != 0
    assert "gpuLayers" in result.stdout + result.stderr


def test_verify_job_and_api_key_secret_pass_strict_validation(tmp_path: Path) -> None:
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    # apiKey without a secret set: rendered with the placeholder (no Pulumi CLI needed).
    text = text.replace(
        "    gpuGate: true\n", "    gpuGate: true\n    verifyAfterUp: true\n    apiKey: true\n"
    )
    # The check runs after an awaited rollout: upgrade keep (replace does not await the pod).
    text = text.replace("    upgrade: replace\n", "    upgrade: keep\n")
    # An HF token set with `pulumi config set --secret` (render cannot decrypt it).
    text = text.replace("config:\n", "config:\n  llm-infra:hfToken:\n    secure: v1:AAAA\n", 1)
    (tmp_path / "Pulumi.strix-halo.yaml").write_text(text)
    (tmp_path / "strix-halo.verify.json").write_text('{"version": 1, "cases": []}\n')
    out = tmp_path / "out"
    result = render(str(tmp_path / "Pulumi.strix-halo.yaml"), out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all((out / "manifests.yaml").read_text())]
    assert kinds.count("Job") == 2
    secrets = [
        d for d in yaml.safe_load_all((out / "manifests.yaml").read_text()) if d["kind"] == "Secret"
    ]
    # Every Secret: its key names, each value the placeholder.
    by_name = {s["metadata"]["name"]: s["stringData"] for s in secrets}
    assert by_name == {
        "models-hf-token": {"token": "[secret]"},
        "deepseek-v4-flash-0731-api-key": {"api-key": "[secret]"},
    }
    validated = kubernetes_validate(out / "manifests.yaml")
    assert validated.returncode == 0, validated.stdout + validated.stderr


@pytest.mark.parametrize("access", ["privileged", "device-plugin"])
def test_a_rocm_runtime_render_passes_strict_validation(tmp_path: Path, access: str) -> None:
    """ROCm cannot run here (no AMD GPU): its manifests are held to the API server's schema."""
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    server = f"  llm-infra:server:\n    runtime: rocm\n    gpuAccess: {access}\n"
    if access == "device-plugin":
        server += "    renderGroupId: 992\n"
    (tmp_path / "Pulumi.strix-halo.yaml").write_text(text.replace("  llm-infra:server:\n", server))
    out = tmp_path / "out"
    result = render(str(tmp_path / "Pulumi.strix-halo.yaml"), out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    (server_deployment,) = [
        d for d in documents if d["kind"] == "Deployment" and "llama-server" in json.dumps(d)
    ]
    pod = server_deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "llama-server"]
    assert container["image"] == "ghcr.io/ggml-org/llama.cpp:server-rocm-b11434"
    paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert paths == ({"/dev/kfd", "/dev/dri"} if access == "privileged" else set())
    validated = kubernetes_validate(out / "manifests.yaml")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert "dev=ROCm" in json.dumps(container["startupProbe"])


def test_a_speculative_draft_render_passes_strict_validation(tmp_path: Path) -> None:
    """The fetch Job with the draft's container after the model's init container, and the
    server's draft check, are held to the API server's schema."""
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    draft = (
        "    speculative:\n      method: draft-dspark\n      draft:\n"
        "        repo: unsloth/DeepSeek-V4-Flash-0731-GGUF\n"
        "        files: [DSpark/DeepSeek-V4-Flash-0731-DSpark-Q8_0.gguf]\n        sizeGib: 1.5\n"
    )
    (tmp_path / "Pulumi.strix-halo.yaml").write_text(
        text.replace("    gpuLayers: 40\n", "    gpuLayers: 40\n" + draft)
    )
    out = tmp_path / "out"
    result = render(str(tmp_path / "Pulumi.strix-halo.yaml"), out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    (job,) = [d for d in documents if d["kind"] == "Job" and "-fetch-" in d["metadata"]["name"]]
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"] + pod["containers"]] == [
        "fetch",
        "fetch-draft",
    ]
    validated = kubernetes_validate(out / "manifests.yaml")
    assert validated.returncode == 0, validated.stdout + validated.stderr


def test_the_node_port_service_and_its_network_policy_pass_strict_validation(
    tmp_path: Path,
) -> None:
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    text += "  llm-infra:network:\n    nodePort: 30080\n    allowCidrs: [192.168.1.0/24]\n"
    (tmp_path / "Pulumi.exposed.yaml").write_text(text)
    out = tmp_path / "out"
    result = render(str(tmp_path / "Pulumi.exposed.yaml"), out, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    exposed = next(d for d in documents if d["metadata"]["name"].endswith("-node-port"))
    assert exposed["spec"]["type"] == "NodePort"
    assert [p["nodePort"] for p in exposed["spec"]["ports"]] == [30080]
    validated = kubernetes_validate(out / "manifests.yaml")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    custom = [d for d in documents if d["apiVersion"] == "monitoring.coreos.com/v1"]
    assert validated.stdout.count("passed for resource") == len(documents) - len(custom) == 11
