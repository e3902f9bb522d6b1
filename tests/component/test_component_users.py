"""What a program using the components directly gets: locked files, a warning, the plan."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components import GgufModelStore
from components.validation import ComponentInputError
from infra.component_users import memory_plan, store_files_from_lock
from infra.config import ConfigError
from infra.render import run_program
from tests.conftest import MODEL_VOLUME
from tests.support.examples import python_example
from tests.support.tiny_gguf import header_summary, write_tiny_split_model

REPO = "example/tiny-GGUF"
REVISION = "a" * 40


def write_lock(path: Path, files: list[Path], gguf: dict[str, Any] | None = None) -> Path:
    """A lock as `llm-infra lock` writes it, for files at hand."""
    document = {
        "version": 1,
        "repo": REPO,
        "revision": REVISION,
        "requested_revision": "main",
        "patterns": [file.name for file in files],
        "files": [
            {
                "path": file.name,
                "name": file.name,
                "size": file.stat().st_size,
                "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
            }
            for file in files
        ],
        **({"gguf": gguf} if gguf else {}),
    }
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def tiny_lock(tmp_path: Path) -> Path:
    shards = write_tiny_split_model(tmp_path / "model", "tiny", 3)
    return write_lock(tmp_path / "tiny.lock.json", shards, header_summary(shards))


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: said.append(message))
    return said


def store_args(files: list[Any]) -> Any:
    return {
        "namespace": "llm",
        "repo": REPO,
        "revision": REVISION,
        "files": files,
        "volume_size": "1Gi",
        "storage_class": "local-path",
        "node_selector": {"kubernetes.io/hostname": "nucbox"},
        "fetch_image": "python:3.12.8-slim-bookworm",
    }


def build_store(files: list[Any]) -> Callable[[], None]:
    def program() -> None:
        GgufModelStore("models", store_args(files))

    return program


def server_args(gpu_layers: int = 2, ctx_size: int = 256) -> Any:
    probe = {
        "path": "/health",
        "initial_delay_seconds": 0,
        "period_seconds": 10,
        "failure_threshold": 60,
        "timeout_seconds": 5,
    }
    return {
        "namespace": "llm",
        "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
        "flags": {
            "model_path": "/models/tiny-00001-of-00003.gguf",
            "alias": "tiny",
            "host": "0.0.0.0",
            "port": 8080,
            "jinja": False,
            "gpu_layers": gpu_layers,
            "ctx_size": ctx_size,
            "parallel": 1,
            "cont_batching": True,
            "cache_type_k": "f16",
            "cache_type_v": "f16",
            "temperature": 0.6,
            "top_p": 0.95,
            "threads": 2,
        },
        "model": dict(MODEL_VOLUME),
        "node_selector": {"kubernetes.io/hostname": "nucbox"},
        "resources": {"limits": {"memory": "12Gi"}},
        "probes": {"startup": probe, "readiness": probe, "liveness": probe},
    }


def fetched_lock(rendered: Any) -> dict[str, Any]:
    config_map = next(r for r in rendered.resources if r["name"].endswith("-fetcher"))
    return json.loads(config_map["inputs"]["data"]["lock.json"])  # type: ignore[no-any-return]


def test_store_files_from_a_lock_are_pinned_and_fetched_verified(
    tiny_lock: Path, warnings: list[str]
) -> None:
    files = store_files_from_lock(tiny_lock)
    assert [f["name"] for f in files] == [f"tiny-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(f["size"] and len(f["sha256"] or "") == 64 for f in files)
    rendered = run_program(build_store(files), {}, [], "t", preview=False)
    assert fetched_lock(rendered)["files"] == files
    assert warnings == []


def test_files_without_sha256_are_fetched_with_a_warning_at_up(warnings: list[str]) -> None:
    files = [{"path": "tiny.gguf", "name": "tiny.gguf"}]
    run_program(build_store(files), {}, [], "t")
    assert warnings == [], "a preview fetches nothing"
    run_program(build_store(files), {}, [], "t", preview=False)
    (warning,) = warnings
    assert "1 of 1 files ('tiny.gguf', ...) have no sha256 and are fetched unverified" in warning
    assert "store_files_from_lock" in warning


def test_a_lock_that_is_not_a_lock_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.lock.json"
    path.write_text(json.dumps({"version": 1, "repo": REPO}))
    with pytest.raises(ConfigError, match=str(path)):
        store_files_from_lock(path)


def test_memory_plan_gives_the_verdict_on_a_device_size(tiny_lock: Path) -> None:
    files = store_files_from_lock(tiny_lock)
    plan = memory_plan(server_args(), store_args(files), tiny_lock, vram_gib=8)
    assert plan.fits and plan.to_json()["devices"]["vram"]["capacity_gib"] == 8
    tight = memory_plan(server_args(), store_args(files), tiny_lock, vram_gib=0.001)
    assert not tight.fits and "plan: does not fit in VRAM" in tight.table()


def test_memory_plan_checks_the_args_as_the_constructors_do(tiny_lock: Path) -> None:
    files = store_files_from_lock(tiny_lock)
    with pytest.raises(ComponentInputError, match=r"flags\.gpu_layers: -1"):
        memory_plan(server_args(gpu_layers=-1), store_args(files), tiny_lock, vram_gib=8)


def test_python_example_fetches_the_locked_files_when_a_lock_is_beside_it(
    tmp_path: Path, warnings: list[str]
) -> None:
    model = tmp_path / "Qwen3-8B-Q4_K_M.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    lock = write_lock(tmp_path / "qwen3-8b.lock.json", [model])
    example = python_example()
    rendered = run_program(
        lambda: example.main(lock), {}, [], "dev", "llm-infra-example-python", preview=False
    )
    (locked,) = fetched_lock(rendered)["files"]
    assert locked["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert warnings == []


def test_python_example_with_a_typo_in_a_node_label_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    example = python_example()
    monkeypatch.setattr(example, "NODE", {"hardware": "high memory"})
    with pytest.raises(ComponentInputError) as caught:
        run_program(lambda: example.main(tmp_path / "absent.lock.json"), {}, [], "dev")
    assert "node_selector.hardware: 'high memory': String should match pattern" in str(caught.value)


def test_memory_plan_counts_a_programs_extra_args_and_refuses_what_it_cannot(
    tiny_lock: Path,
) -> None:
    files = store_files_from_lock(tiny_lock)
    plain = memory_plan(server_args(), store_args(files), tiny_lock, vram_gib=8)
    args = {**server_args(), "extra_args": ["--n-cpu-ffn", "2", "--no-kv-offload"]}
    plan = memory_plan(args, store_args(files), tiny_lock, vram_gib=8)  # type: ignore[arg-type]
    (problem,) = plan.problems
    assert problem.startswith("plan: extra_args[2]: --no-kv-offload changes memory the plan")
    # Layer 1 (on the GPU at -ngl 2) keeps its dense FFN in host RAM: fewer weights on the GPU.
    assert plan.devices["vram"].items["weights"] < plain.devices["vram"].items["weights"]
