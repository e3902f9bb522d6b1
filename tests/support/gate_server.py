"""llama-server started the way the gated pod starts it: through the load-log wrapper.

``components.llamacpp.gate.server_command`` is the container's command; here the same
shell runs with a local llama-server binary (the CPU build by default, the Vulkan build on the
GPU machine) instead of the image's ``/app/llama-server``.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

from components.llamacpp.gate import load_log_shell
from tests.support.llama_server import (
    LlamaServerStartError,
    _flag_value,
    _wait_healthy,
    stock_llama_server_binary,
    stop,
)

_CACHE_STATE = re.compile(r"cache state: (\d+) prompts, ([0-9.]+) MiB")


@contextlib.contextmanager
def run_gated_llama_server(
    argv: list[str],
    console: pathlib.Path,
    *,
    binary: str | None = None,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run ``sh -c <load_log_shell> llama-server *argv`` and yield the base URL once healthy.

    ``argv`` must hold ``--log-file LOG`` (the load log the gate reads) and ``--port``; the
    server's console output (the container log, in a pod) goes to ``console``.
    """
    log = _flag_value(argv, "--log-file")
    port = _flag_value(argv, "--port")
    script = load_log_shell(log, binary or stock_llama_server_binary())
    base_url = f"http://127.0.0.1:{port}"
    with console.open("wb") as out:
        process = subprocess.Popen(
            ["sh", "-c", script, "llama-server", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            _wait_healthy(process, base_url, console, timeout)
            yield base_url
        finally:
            stop(process)


def complete(base_url: str, prompt: str, max_tokens: int = 4, timeout: float = 120.0) -> Any:
    """One non-streamed /completion request (cached into the prompt cache by llama-server)."""
    body = json.dumps({"prompt": prompt, "n_predict": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(
        base_url + "/completion", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def cached_prompts(console_text: str) -> int | None:
    """The prompt count of the last ``cache state: N prompts`` line (``-lv 4``)."""
    found = _CACHE_STATE.findall(console_text)
    return int(found[-1][0]) if found else None


__all__ = [
    "LlamaServerStartError",
    "cached_prompts",
    "complete",
    "run_gated_llama_server",
]
