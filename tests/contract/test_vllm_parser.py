"""vLLM 0.33's own argument parser accepts the rendered `vllm serve` argv."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from components.vllm.builders import vllm_serve_args
from tests.support.vllm_parser import SCRIPT, vllm_python
from tests.support.vllm_samples import sample_flags


def parse(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run vLLM's parser on argv in the vLLM venv."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    return subprocess.run(
        [str(vllm_python()), str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_vllm_accepts_the_rendered_serve_argv_with_the_intended_values() -> None:
    result = parse(vllm_serve_args(sample_flags()))
    assert result.returncode == 0, result.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["model"] == "/models/DeepSeek-V4-Flash-0731"
    assert parsed["served_model_name"] == ["deepseek-v4-flash-0731"]
    assert parsed["port"] == 8000
    assert parsed["tensor_parallel_size"] == 1
    assert parsed["max_model_len"] == 262144
    assert parsed["max_num_batched_tokens"] == 2048
    assert parsed["kv_cache_memory_bytes"] == 20 * 10**9
    assert parsed["kv_offloading_size"] == 96
    assert parsed["kv_offloading_backend"] == "native"
    assert parsed["speculative_config"] == {"method": "dspark", "num_speculative_tokens": 7}
    assert parsed["reasoning_parser"] == "deepseek_v4"
    assert parsed["enable_auto_tool_choice"] is True
    assert parsed["tool_call_parser"] == "deepseek_v4"
    assert parsed["enable_prefix_caching"] is True


def test_vllm_rejects_the_removed_swap_space_flag() -> None:
    result = parse([*vllm_serve_args(sample_flags()), "--swap-space", "4"])
    assert result.returncode != 0
    assert "swap-space" in result.stderr
