"""The policy pack: crafted violations fail with the message, and the pack's wiring.

The Caddy rule reads a Caddyfile with the real `caddy adapt`, so its tests (and the real renders
passing every policy) are in tests/contract/test_policy_caddy.py; the mi300x tests here pass
`allow_world`, which the Caddy rule answers without running caddy."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import policy.__main__ as pack
from policy import resources, validators
from tests.support.policy import (
    Render,
    edited,
    messages,
    named,
    policy_args,
    run_policy,
    server_container,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_failing_render_lists_each_violation_then_the_count(
    render_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resources, _ = validators.load_render(render_dirs["strix-halo"])
    for resource in resources:
        if resource["type"] == "kubernetes:core/v1:PersistentVolumeClaim":
            resource.setdefault("options", {})["protect"] = False
    (tmp_path / "resources.json").write_text(json.dumps(resources))
    assert validators.main([str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith(f": {len(lines) - 1} violations") and len(lines) >= 2
    assert all("[model-pvc-protected]" in line for line in lines[:-1])


def test_real_renders_contain_what_the_policies_inspect(
    strix_render: Render, mi300x_render: Render
) -> None:
    # Guards against passing by finding nothing: each rule has something to look at.
    assert resources.containers(named(strix_render[0], "-deployment"))
    assert named(strix_render[0], "models-pvc")["options"]["protect"] is True
    assert {"/opt/llm/compose.yaml", "/opt/llm/Caddyfile"} <= set(mi300x_render[1])


def test_floating_image_tag_fails(strix_render: Render) -> None:
    resources, files = strix_render
    server_container(resources)["image"] = "ghcr.io/ggml-org/llama.cpp:server-vulkan"
    assert messages(resources, files) == [
        "[images-pinned] deepseek-v4-flash-0731-deployment: container llama-server image "
        "'ghcr.io/ggml-org/llama.cpp:server-vulkan' is not pinned: use a digest (@sha256:...) "
        "or a tag that names one build (x.y.z or bNNNN)"
    ]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            "caddy:2.11.7-alpine",
            "caddy:latest",
            "[images-pinned] vllm-compose: compose service caddy image 'caddy:latest' is not "
            "pinned: use a digest (@sha256:...) or a tag that names one build (x.y.z or bNNNN)",
            id="floating-image",
        ),
        pytest.param(
            "start_period: 3600s",
            "start_period: 1m",
            "[gpu-server-probes] vllm-compose: compose service vllm: healthcheck allows 105s "
            "(start_period + interval x retries), less than the 300s model load",
            id="healthcheck-start-period-shorter-than-the-load",
        ),
    ],
)
def test_a_compose_file_edit_fails_its_policy(
    mi300x_render: Render, old: str, new: str, message: str
) -> None:
    resources, files = mi300x_render
    edited(files, "/opt/llm/compose.yaml", old, new)
    assert messages(resources, files, allow_world=True) == [message]


def test_startup_probe_shorter_than_the_load_fails(strix_render: Render) -> None:
    resources, files = strix_render
    server_container(resources)["startupProbe"]["failureThreshold"] = 10
    assert messages(resources, files) == [
        "[gpu-server-probes] deepseek-v4-flash-0731-deployment: container llama-server: "
        "startupProbe allows 130s (initialDelaySeconds + periodSeconds x failureThreshold), less "
        "than the 300s model load: the pod would be killed while loading (raise failureThreshold)"
    ]


def test_min_load_is_configurable(render_dirs: dict[str, Path]) -> None:
    # The default startup probe allows 30 + 10 x 177 = 1800 s.
    assert validators.check_render(render_dirs["strix-halo"], min_load_seconds=1800) == []
    (violation,) = validators.check_render(render_dirs["strix-halo"], min_load_seconds=1801)
    assert "startupProbe allows 1800s" in violation.message


def test_gpu_server_without_startup_probe_falls_back_to_liveness(strix_render: Render) -> None:
    resources, files = strix_render
    container = server_container(resources)
    del container["startupProbe"]
    # The liveness probe alone allows 0 + 30 x 5 = 150 s: it would kill a loading server.
    assert any("livenessProbe allows 150s" in m for m in messages(resources, files))
    del container["livenessProbe"]
    assert any(
        "a GPU server without a startupProbe or livenessProbe" in m
        for m in messages(resources, files)
    )


def test_compose_up_wait_timeout_shorter_than_the_load_fails(mi300x_render: Render) -> None:
    resources, files = mi300x_render
    up = named(resources, "vllm-up")
    up["inputs"]["create"] = up["inputs"]["create"].replace(
        "--wait-timeout 3600", "--wait-timeout 60"
    )
    assert messages(resources, files, allow_world=True) == [
        "[gpu-server-probes] vllm-up: `docker compose up --wait-timeout 60` gives up before the "
        "300s model load"
    ]


def test_hf_token_literal_in_env_fails(strix_render: Render) -> None:
    resources, files = strix_render
    server_container(resources)["env"].append({"name": "HF_TOKEN", "value": "hf_" + "a" * 34})
    assert messages(resources, files) == [
        "[no-secret-literals] deepseek-v4-flash-0731-deployment: container llama-server: env "
        "HF_TOKEN has a literal value; take it from a Secret (valueFrom.secretKeyRef, an "
        "env_file) instead"
    ]


def test_env_from_a_secret_and_api_key_from_a_variable_pass(strix_render: Render) -> None:
    resources, files = strix_render
    container = server_container(resources)
    ref = {"secretKeyRef": {"name": "llm-api-key", "key": "key"}}
    container["env"].append({"name": "LLAMA_API_KEY", "valueFrom": ref})
    container["args"] += ["--api-key", "$(LLAMA_API_KEY)", "--api-key-file", "/run/key"]
    assert messages(resources, files) == []


def test_api_key_flag_with_a_literal_fails(strix_render: Render) -> None:
    resources, files = strix_render
    server_container(resources)["args"] += ["--api-key=sk-" + "x" * 24]
    assert messages(resources, files) == [
        "[no-secret-literals] deepseek-v4-flash-0731-deployment: container llama-server: "
        "`--api-key` is given a literal value; pass a file (--api-key-file) or a variable set "
        "from a Secret",
        "[no-secret-literals] deepseek-v4-flash-0731-deployment: container llama-server: "
        "contains what looks like a credential (sk-xx...)",
    ]


def test_secret_literals_in_compose_and_scripts_fail(mi300x_render: Render) -> None:
    resources, files = mi300x_render
    edited(
        files,
        "/opt/llm/compose.yaml",
        "HF_HUB_OFFLINE: '1'",
        "HF_HUB_OFFLINE: '1'\n      VLLM_API_KEY: s3cret",
    )
    check = named(resources, "vllm-check")
    check["inputs"]["create"] += "\ncurl -H 'Authorization: Bearer sk-abcdefghijklmnopqrstu' x\n"
    assert messages(resources, files, allow_world=True) == [
        "[no-secret-literals] vllm-compose: compose service vllm: env VLLM_API_KEY has a "
        "literal value; take it from a Secret (valueFrom.secretKeyRef, an env_file) instead",
        "[no-secret-literals] vllm-check: create script: contains what looks like a credential "
        "(sk-ab...)",
    ]


def test_unprotected_model_pvc_fails(strix_render: Render) -> None:
    resources, files = strix_render
    del named(resources, "models-pvc")["options"]["protect"]
    assert messages(resources, files) == [
        "[model-pvc-protected] models-pvc: a model PVC without `protect`: a replace or destroy "
        "would delete the downloaded weights (set ResourceOptions(protect=True))"
    ]


@pytest.mark.parametrize(
    ("text", "seconds"), [("3600s", 3600), ("1h30m", 5400), ("90", 90), ("1m30s", 90), (45, 45)]
)
def test_compose_durations(text: object, seconds: float) -> None:
    assert resources.duration_seconds(text) == seconds


def test_malformed_duration_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        resources.duration_seconds("ten minutes")


# --- the pulumi_policy wiring ---------------------------------------------------------------


def test_pack_has_one_policy_per_validator() -> None:
    assert tuple(p.name for p in pack.policies()) == validators.POLICY_NAMES


def test_pack_reads_protect_from_the_resource_options(strix_render: Render) -> None:
    pvc = named(strix_render[0], "models-pvc")
    kind = "kubernetes:core/v1:PersistentVolumeClaim"
    assert run_policy("model-pvc-protected", policy_args(kind, pvc["inputs"], protect=True)) == []
    assert len(run_policy("model-pvc-protected", policy_args(kind, pvc["inputs"]))) == 1


def test_pack_passes_min_load_seconds_from_its_config(strix_render: Render) -> None:
    deployment = named(strix_render[0], "-deployment")
    kind = "kubernetes:apps/v1:Deployment"
    assert run_policy("gpu-server-probes", policy_args(kind, deployment["inputs"])) == []
    strict = policy_args(kind, deployment["inputs"], minLoadSeconds=3600)
    assert run_policy("gpu-server-probes", strict) == [
        "container llama-server: startupProbe allows 1800s (initialDelaySeconds + periodSeconds"
        " x failureThreshold), less than the 3600s model load: the pod would be killed while "
        "loading (raise failureThreshold)"
    ]


def test_pack_metadata_names_a_python_runtime_and_the_installed_sdk() -> None:
    metadata = yaml.safe_load((ROOT / "policy/PulumiPolicy.yaml").read_text())
    assert metadata["runtime"]["name"] == "python"
    assert metadata["version"]
    requirements = (ROOT / "policy/requirements.txt").read_text().splitlines()
    assert f"pulumi-policy=={importlib.metadata.version('pulumi-policy')}" in requirements


def test_pack_serves_its_policies_to_the_pulumi_engine(tmp_path: Path) -> None:
    # What `pulumi preview --policy-pack policy` does first: start the pack and ask what it holds.
    import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import analyzer_pb2_grpc

    process = subprocess.Popen(
        [sys.executable, str(ROOT / "policy/__main__.py")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = analyzer_pb2_grpc.AnalyzerStub(channel).GetAnalyzerInfo(
                empty_pb2.Empty(), timeout=30
            )
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert info.name == pack.PACK_NAME
    assert tuple(p.name for p in info.policies) == validators.POLICY_NAMES


def test_a_run_to_completion_job_in_the_server_image_is_no_gpu_server(strix_render: Render) -> None:
    resources, files = strix_render
    deployment = named(resources, "deepseek-v4-flash-0731-deployment")
    job: dict[str, Any] = {
        "type": "kubernetes:batch/v1:Job",
        "name": "models-preflight",
        "inputs": {
            "kind": "Job",
            "spec": {"template": copy.deepcopy(deployment["inputs"]["spec"]["template"])},
        },
    }
    for container in job["inputs"]["spec"]["template"]["spec"]["containers"]:
        container.pop("startupProbe", None)
        container.pop("livenessProbe", None)
    assert validators.check_gpu_server_probes(job, files) == []
    as_deployment = {**job, "type": "kubernetes:apps/v1:Deployment"}
    as_deployment["inputs"] = {**job["inputs"], "kind": "Deployment"}
    assert validators.check_gpu_server_probes(as_deployment, files)


def test_rpc_server_is_no_gpu_server_but_a_llama_server_without_probes_is() -> None:
    def deployment(container: dict[str, Any]) -> dict[str, Any]:
        spec = {"template": {"spec": {"containers": [container]}}}
        return {"type": "kubernetes:apps/v1:Deployment", "name": "x", "inputs": {"spec": spec}}

    image = "registry.lan/llama.cpp:vulkan-rpc-b11434"
    worker = {"name": "rpc-server", "image": image, "command": ["/app/ggml-rpc-server", "-p", "1"]}
    assert validators.check_gpu_server_probes(deployment(worker)) == []
    server = {"name": "llama-server", "image": image}
    (problem,) = validators.check_gpu_server_probes(deployment(server))
    assert "without a startupProbe or livenessProbe" in problem


# --- the Caddyfile as Caddy reads it ------------------------------------------------------------
