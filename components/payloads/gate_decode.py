"""The gate's first decode: one one-token request after the load, which must be answered.

Standard library only. A build can load, offload every layer and turn healthy, then abort on
the first real graph (ggml-org/llama.cpp#29028: deepseek4 on RADV gfx1151 aborts at the first
decode). ``/health`` cannot see that; one ``POST /completion`` with ``n_predict: 1`` does.
llama-server b11434 serves ``/completion`` (tools/server/server.cpp:270) and checks the API key
on every path but ``/health`` (tools/server/server-http.cpp:267): the key goes in an
``Authorization: Bearer`` header, read from a file or the environment, never from argv.

The Python check (``first_decode``) and the probe's shell (``components/llamacpp/gate.py``)
print the same text: ``decode_failure(kind, detail)``.
"""

from __future__ import annotations

import os

from components.payloads import http_policy

DECODE_PATH = "/completion"
DECODE_BODY = '{"prompt": "Hello", "n_predict": 1, "cache_prompt": false}'
"""One prompt token or two and one generated token: the whole graph runs once."""
DECODE_TIMEOUT_S = 120
"""The first decode may compile the backend's kernels (Vulkan pipelines) before it answers."""
MAX_ANSWER = 1024 * 1024
"""A one-token completion's answer is a few hundred bytes."""
API_KEY_ENV = "LLAMA_API_KEY"
"""The variable llama-server reads its key from (common/arg.cpp, ``--api-key``)."""

WHAT = f"the first decode (POST {DECODE_PATH}, n_predict 1) failed: "
CRASH_CAUSE = (
    "likely cause: a backend kernel crashed or aborted on the first real graph (as "
    "ggml-org/llama.cpp#29028, deepseek4 on RADV gfx1151); the container log shows the abort "
    "(GGML_ASSERT, vk::DeviceLostError); try another runtime or build (server.runtime)"
)
KEY_CAUSE = (
    "likely cause: the API key was refused: the gate must send the key llama-server reads "
    "(--api-key-file)"
)
SLOW_CAUSE = (
    "likely cause: a hung GPU queue, or a first decode slower than the probe allows; the "
    "container log shows which"
)
REJECTED_CAUSE = "likely cause: llama-server refused the request (see the status)"

# kind -> (detail text before the detail value, after it, cause)
DECODE_FAILURES: dict[str, tuple[str, str, str]] = {
    "refused": ("the connection was refused", " (the server process is gone)", CRASH_CAUSE),
    "dropped": ("the connection was dropped", " before an answer", CRASH_CAUSE),
    "timeout": ("no answer in ", " s", SLOW_CAUSE),
    "server-error": ("HTTP ", " (server error)", CRASH_CAUSE),
    "unauthorized": ("HTTP ", " (unauthorized)", KEY_CAUSE),
    "rejected": ("HTTP ", "", REJECTED_CAUSE),
}


def decode_failure(kind: str, detail: str = "") -> str:
    """The one line a failed first decode prints (the shell composes the same pieces)."""
    before, after, cause = DECODE_FAILURES[kind]
    return f"{WHAT}{before}{detail}{after}; {cause}"


def http_failure_kind(status: int) -> str:
    """The kind of a non-200 answer."""
    if status >= 500:
        return "server-error"
    if status in (401, 403):
        return "unauthorized"
    return "rejected"


def read_api_key(path: str | None) -> str | None:
    """The key llama-server takes from ``--api-key-file`` (first line not empty nor ``#``)."""
    if path:
        with open(path, encoding="utf-8") as handle:
            for line in handle.read().splitlines():
                if line and not line.startswith("#"):
                    return line
        return None
    return os.environ.get(API_KEY_ENV) or None


def first_decode(
    base_url: str, api_key: str | None = None, timeout: float = DECODE_TIMEOUT_S
) -> str | None:
    """Send the one-token request; None when answered with 200, else the failure line.

    Under the one HTTP client policy (``http_policy``): llama-server never redirects, so a
    redirect is a failure and the key never leaves for another host; a malformed URL is a
    failure naming it."""
    limits = http_policy.Limits(
        max_redirects=0, head_timeout_s=timeout, stall_s=timeout, deadline_s=timeout + 30
    )
    try:
        with http_policy.request(
            base_url.rstrip("/") + DECODE_PATH,
            method="POST",
            headers={"Content-Type": "application/json"},
            token=api_key,
            body=DECODE_BODY.encode(),
            max_body=MAX_ANSWER,
            limits=limits,
        ) as response:
            response.read_all()
            return None
    except http_policy.HttpError as exc:
        if exc.status is not None:
            return decode_failure(http_failure_kind(exc.status), str(exc.status))
        if exc.kind == "refused":
            return decode_failure("refused")
        if exc.kind == "timeout":
            return decode_failure("timeout", f"{timeout:g}")
        if exc.kind in ("url", "redirect"):
            return f"{WHAT}{exc}; {REJECTED_CAUSE}"
        return decode_failure("dropped")
