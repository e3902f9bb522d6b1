"""Sample inputs of the vLLM ROCm server and its builders (flags, Caddy site, compose, host
scripts) as the unit, component and contract tests share them."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from components.vllm.builders import (
    compose_file,
    remote_paths,
)
from components.vllm.host_scripts import (
    check_script,
    down_script,
    env_file_script,
    fetch_script,
    preflight_script,
    up_script,
    verify_patches_script,
    verify_script,
)
from components.vllm.inputs import CaddySite, ModelLock, PatchOverlay, VllmFlags, VllmRocmServerArgs

MODEL = "/models/DeepSeek-V4-Flash-0731"


MODEL_DIR = "/srv/models/DeepSeek-V4-Flash-0731"


VLLM_IMAGE = "vllm/vllm-openai-rocm@sha256:" + "c" * 64


PATHS = remote_paths("/opt/llm")


def sample_flags() -> VllmFlags:
    """The seed 002 flags."""
    return {
        "model": MODEL,
        "served_model_name": "deepseek-v4-flash-0731",
        "host": "0.0.0.0",
        "port": 8000,
        "tensor_parallel_size": 1,
        "max_model_len": 262144,
        "max_num_batched_tokens": 2048,
        "kv_cache_memory_bytes": 20 * 10**9,
        "kv_offloading_size_gib": 96,
        "kv_offloading_backend": "native",
        "enable_prefix_caching": True,
        "speculative_config": {"method": "dspark", "num_speculative_tokens": 7},
        "reasoning_parser": "deepseek_v4",
        "tool_call_parser": "deepseek_v4",
    }


def sample_caddy(**overrides: object) -> CaddySite:
    """A domain site with automatic HTTPS and one allowed network."""
    settings: dict[str, object] = {
        "site": "llm.example.com",
        "tls": "auto",
        "acme_email": "ops@example.com",
        "allowed_cidrs": ["198.51.100.0/24"],
        "image": "caddy:2.11.7-alpine",
    }
    settings.update(overrides)
    return settings  # type: ignore[return-value]


def sample_patch(sha256: str = "a" * 64) -> PatchOverlay:
    """One overlay over a vLLM source file."""
    return {
        "source": "patches/fp8_mi300x.py",
        "target": "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/fp8.py",
        "sha256": sha256,
    }


def sample_compose(**overrides: object) -> dict[str, Any]:
    """compose_file with the sample settings."""
    kwargs: dict[str, object] = {
        "image": VLLM_IMAGE,
        "flags": sample_flags(),
        "model_dir": MODEL_DIR,
        "paths": PATHS,
        "patches": [sample_patch()],
        "caddy": sample_caddy(),
        "caddyfile_sha256": "d" * 64,
        "lock_sha256": "e" * 64,
        "startup_seconds": 3600,
    }
    kwargs.update(overrides)
    return compose_file(**kwargs)  # type: ignore[arg-type]


def all_scripts() -> list[str]:
    """Every host script with the sample settings (shellcheck runs over these too)."""
    return [
        preflight_script(
            base_dir="/opt/llm",
            model_dir=MODEL_DIR,
            requirements={"min_free_disk_gib": 200, "min_ram_gib": 230},
        ),
        verify_patches_script(PATHS, [sample_patch(), sample_patch("b" * 64)]),
        fetch_script(
            paths=PATHS,
            model_dir=MODEL_DIR,
            fetch_image="python:3.12.11-slim",
            lock_sha256="1" * 64,
            fetcher_sha256="2" * 64,
        ),
        env_file_script(PATHS, "llm"),
        up_script(PATHS, "llm", "3" * 64, 3600),
        down_script(PATHS, "llm", MODEL_DIR),
        check_script(PATHS, "llm", sample_caddy(), 8000, "deepseek-v4-flash-0731"),
        verify_script("/opt/llm", "llm", "python:3.12.11-slim", "vllm:8000", "4" * 64),
        # A stack without overlays (shellcheck: no function left unused).
        verify_patches_script(PATHS, []),
    ]


API_KEY = "sk-live-api-key-0123456789"


SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA-secret\n"


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4/xsGD6cFJkzyPd9WOAb+EYO8sLhsaJw+5cfTzUQ7w"


LOCK: ModelLock = {
    "repo": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "revision": "0" * 40,
    "files": [{"path": "config.json", "name": "config.json", "size": 1234, "sha256": "1" * 64}],
}


def server_args(patch: Path | None = None, **overrides: Any) -> VllmRocmServerArgs:
    """Sample args; the secrets are plain strings here, as a caller may pass them."""
    args: dict[str, Any] = {
        "connection": {
            "host": "203.0.113.10",
            "user": "deploy",
            "private_key": SSH_KEY,
            "host_key": HOST_KEY,
        },
        "model_dir": MODEL_DIR,
        "model_lock": LOCK,
        "fetch_image": "python:3.12.11-slim",
        "image": VLLM_IMAGE,
        "flags": sample_flags(),
        "caddy": sample_caddy(),
        "api_key": API_KEY,
        "requirements": {"min_free_disk_gib": 200, "min_ram_gib": 230},
    }
    if patch is not None:
        args["patches"] = [
            {
                "source": str(patch),
                "target": "/usr/local/lib/python3.12/dist-packages/vllm/fp8.py",
                "sha256": hashlib.sha256(patch.read_bytes()).hexdigest(),
            }
        ]
    args.update(overrides)
    return args  # type: ignore[return-value]
