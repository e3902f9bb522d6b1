"""`llm-infra tune --kubernetes`: the Jobs pass `kubernetes-validate --strict` and checkov like
every rendered manifest, and the runner they ship, run alone from the ConfigMap's own files in a
plain `python3 -I` beside a real llama-server b11434 started as the sidecar is, prints the result
line that `llm-infra tune --collect` turns into the record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import pytest
import yaml

from components.llamacpp.tune_jobs import EXPECT_FILE, RUNNER_FILE, config_key
from components.payloads import tune_local
from components.payloads.tune_job import results_in_log
from infra.cli.tune import server_argv
from infra.config import read_stack_file
from tests.conftest import ROOT
from tests.support import llama_build
from tests.support.checkov import checkov, findings
from tests.support.llama_server import free_port
from tests.support.tiny_gguf import TinyLlamaSpec, write_tiny_model_seeded

SPEC = TinyLlamaSpec(n_layer=2, n_embd=256, n_head=4, n_head_kv=4, n_ff=512,
                     weight_type=gguf.GGMLQuantizationType.Q8_0)  # fmt: skip


def tune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "tune", "strix-halo", *args],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_seeded(tmp_path_factory.mktemp("m"), "tiny", 1, SPEC, seed=3)[0]


@pytest.fixture(scope="module")
def expect(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Expectations recorded against the CPU build with the stack's flags (-ngl 0 on a CPU)."""
    root = tmp_path_factory.mktemp("expect")
    candidate = tune_local.LocalCandidate(
        "cpu", {"backend": "cpu"}, [str(llama_build.binary("llama-server"))],
        env={"GGML_BACKEND_PATH": str(llama_build.variant_library(llama_build.default_variant()))},
        set_args={"-ngl": "0", "--threads": "2"},
    )  # fmt: skip
    doc = tune_local.record_expectations(
        candidate, server_argv(read_stack_file("strix-halo"), None), model=model,
        port=free_port(), log=root / "r.log",
    )  # fmt: skip
    doc["tolerance"]["min_decode_fraction"] = 0.0  # one busy CPU: answers only (see test_verify)
    path = root / "expect.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def jobs(expect: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("jobs")
    result = tune("--kubernetes", str(out), "--runtime", "rocm", "--expect", str(expect),
                  "--stop-server", "--depths", "0,256", "--prefill-tokens", "32",
                  "--decode-tokens", "8")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_the_jobs_pass_kubernetes_validate_strict(jobs: Path) -> None:
    files = sorted(jobs.glob("*.yaml"))
    assert [f.name for f in files] == [
        "00-tune-config.yaml", "01-deepseek-v4-flash-0731-tune-vulkan.yaml",
        "02-deepseek-v4-flash-0731-tune-rocm.yaml",
    ]  # fmt: skip
    tool = shutil.which("kubernetes-validate")
    assert tool, "kubernetes-validate is not installed (pip install -e '.[test]')"
    result = subprocess.run([tool, "--strict", "-k", "1.32.0", *map(str, files)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkov_finds_nothing_but_the_explained_skips(jobs: Path) -> None:
    """With the pods' deny-all NetworkPolicy (CKV2_K8S_6 without it)."""
    merged = jobs / "all.yaml"
    merged.write_text("---\n".join(p.read_text() for p in sorted(jobs.glob("0*.yaml"))))
    report = checkov(merged)
    assert findings(report, "failed_checks") == set()
    for check in report["results"].get("skipped_checks", []):
        assert len(check["check_result"]["suppress_comment"]) > 20, check["check_id"]


def job(jobs: Path, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((jobs / name).read_text())
    return loaded


def test_each_job_is_the_server_pod_with_its_runtime_and_the_runner(jobs: Path) -> None:
    rocm = job(jobs, "02-deepseek-v4-flash-0731-tune-rocm.yaml")
    pod = rocm["spec"]["template"]["spec"]
    server = next(c for c in pod["initContainers"] if c["name"] == "llama-server")
    assert server["image"] == "ghcr.io/ggml-org/llama.cpp:server-rocm-b11434"
    assert server["restartPolicy"] == "Always" and "startupProbe" not in server
    assert {v["name"] for v in pod["volumes"]} >= {"models", "dev-kfd", "tune", "logs"}
    models = next(v for v in pod["volumes"] if v["name"] == "models")
    assert models["persistentVolumeClaim"]["readOnly"] is True
    assert pod["nodeSelector"] == {"hardware": "high-memory", "kubernetes.io/arch": "amd64"}
    assert [c["name"] for c in pod["containers"]] == ["tune"]
    assert pod["restartPolicy"] == "Never" and rocm["spec"]["backoffLimit"] == 0


def test_the_shipped_runner_alone_judges_a_real_server_and_collect_writes_the_record(
    jobs: Path, model: Path, expect: Path, tmp_path: Path
) -> None:
    config = next(yaml.safe_load_all((jobs / "00-tune-config.yaml").read_text()))
    vulkan = job(jobs, "01-deepseek-v4-flash-0731-tune-vulkan.yaml")
    volume = next(v for v in vulkan["spec"]["template"]["spec"]["volumes"] if v["name"] == "tune")
    mount = tmp_path / "opt"
    for item in volume["configMap"]["items"]:
        path = mount / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config["data"][item["key"]])
    assert config_key("components/payloads/verify.py") in config["data"]
    # As Kubernetes would start the sidecar: the stack's args, here on the CPU build as a CPU
    # runtime (`-ngl 0`), its load log where the runner reads it.
    settings = json.loads((mount / "job-vulkan.json").read_text())
    settings.update(expect=str(mount / EXPECT_FILE), runtime={**settings["runtime"],
                    "backend": "cpu"}, gpuLayers="0")  # fmt: skip
    (mount / "job-vulkan.json").write_text(json.dumps(settings))
    port, log = free_port(), tmp_path / "logs" / "llama-server.log"
    log.parent.mkdir()
    candidate = tune_local.LocalCandidate(
        "vulkan", settings["runtime"], [str(llama_build.binary("llama-server"))],
        env={"GGML_BACKEND_PATH": str(llama_build.variant_library(llama_build.default_variant()))},
        set_args={"-ngl": "0", "--threads": "2"},
    )  # fmt: skip
    argv = tune_local.candidate_argv(server_argv(read_stack_file("strix-halo"), None), candidate,
                                     model=model, port=port, log=log)  # fmt: skip
    server = subprocess.Popen(argv, env={**os.environ, **candidate.env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        runner = subprocess.run(
            ["python3", "-I", str(mount / RUNNER_FILE), "--settings",
             str(mount / "job-vulkan.json"), "--url", f"http://127.0.0.1:{port}",
             "--log", str(log)],
            capture_output=True, text=True, check=False, timeout=300, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
    finally:
        tune_local.stop(server)
    assert runner.returncode == 0, runner.stderr
    (result,) = results_in_log(runner.stdout, settings["nonce"])
    assert result.rejection is None and result.current
    assert [d.depth for d in result.depths] == [0, 256]
    assert all(len(d.decode_server.values) == 3 for d in result.depths)
    # As the steps keep it: beside the Jobs, whose settings hold the run's nonce.
    logfile = jobs / "deepseek-v4-flash-0731-tune-vulkan.log"
    logfile.write_text(runner.stdout)
    out = tmp_path / "strix-halo.tune.json"
    collected = tune("--collect", str(logfile), "--output-file", str(out))
    assert collected.returncode == 0, collected.stderr
    record = json.loads(out.read_text())
    assert record["where"] == "kubernetes" and record["winner"]["name"] == "vulkan"
    assert record["candidates"][0]["verdict"] == "kept"


def test_collect_names_a_log_without_a_result(jobs: Path) -> None:
    log = jobs / "unfinished.log"
    log.write_text("tune: loading\n")
    result = tune("--collect", str(log))
    assert result.returncode == 2
    assert f"--collect: {log}: no result line (did the Job finish?" in result.stderr
