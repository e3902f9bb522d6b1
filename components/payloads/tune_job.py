"""One bake-off candidate inside its Kubernetes Job: the runner beside the candidate's
llama-server (a native sidecar Kubernetes started with the stack's rendered command, on the
server's node, the model volume read-only), judged as a local candidate is.

It reads its settings from a file (`job.json`: the candidate's name and runtime, whether it is
the current runtime, what the stack renders for `-ngl`, the depths, runs and token counts), waits
for `/health`, reads the load log from the volume it shares with the server, and runs
`tune_local.judge_loaded`: the gate, the first decode, verify against the stack's expectations,
the figures. It prints one line, `RESULT_PREFIX`, the run's nonce and the result as JSON, which
`llm-infra tune STACK --collect` reads from the Job's log: only a line that starts with the prefix
and the nonce `tune --kubernetes` generated for the run (in each Job's settings, never in text the
server prints), split at newlines only, one per candidate. Whatever the server logged (a model's
chat template, an error line it quotes) cannot write a result. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from components.payloads import verify
from components.payloads.tune_figures import (
    CRASHED_FIRST_DECODE,
    CRASHED_LOADING,
    OUT_OF_MEMORY,
    CandidateResult,
)
from components.payloads.tune_local import OOM_MARKERS, judge_loaded

RESULT_PREFIX = "llm-infra-tune-result: "
"""The start of the line that carries a Job's result in its log."""
# The load log's last line when llama-server gives up (tools/server/server.cpp).
LOAD_FAILED = "exiting due to model loading error"


def _log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _load_failure(text: str) -> str | None:
    seen = next((m for m in OOM_MARKERS if m in text), None)
    if seen:
        return f"{OUT_OF_MEMORY} while loading ({seen})"
    if LOAD_FAILED in text:
        return f"{CRASHED_LOADING} ({LOAD_FAILED})"
    return None


def _healthy(base_url: str, api_key: str | None) -> bool:
    try:
        verify.request_json(base_url, "/health", api_key=api_key, timeout=5.0)
        return True
    except (verify.EndpointError, OSError):
        return False


def run_job(
    settings: dict[str, Any], base_url: str, log: Path, api_key: str | None
) -> CandidateResult:
    """Wait for the sidecar's load, then judge it; the result, rejected or measured."""
    result = CandidateResult(
        str(settings["name"]), dict(settings["runtime"]), current=bool(settings["current"])
    )
    started = time.monotonic()
    deadline = started + float(settings["loadTimeout"])
    while not _healthy(base_url, api_key):
        failure = _load_failure(_log_text(log))
        if failure or time.monotonic() > deadline:
            result.rejection = failure or (
                f"{CRASHED_LOADING}: not healthy after {settings['loadTimeout']} s"
            )
            return result
        time.sleep(2.0)
    result.load_seconds = time.monotonic() - started

    def died(stage: str) -> str | None:
        if _healthy(base_url, api_key):
            return None
        seen = next((m for m in OOM_MARKERS if m in _log_text(log)), None)
        if seen:
            return f"{OUT_OF_MEMORY} {stage} ({seen})"
        crashed = CRASHED_FIRST_DECODE if stage == "at the first decode" else f"crashed {stage}"
        return f"{crashed}: the server stopped answering (the pod's events say why)"

    expectations = verify.load_expectations(Path(settings["expect"]))
    judge_loaded(
        result, base_url, _log_text(log), backend=str(settings["runtime"]["backend"]),
        gpu_layers=settings.get("gpuLayers"), expectations=expectations,
        depths=[int(d) for d in settings["depths"]], runs=int(settings["runs"]),
        prefill_tokens=int(settings["prefillTokens"]),
        decode_tokens=int(settings["decodeTokens"]), api_key=api_key, died=died,
    )  # fmt: skip
    return result


def result_line(nonce: str, result: CandidateResult) -> str:
    """The runner's one result line."""
    document = {**result.to_json(), "rejection": result.rejection}
    return f"{RESULT_PREFIX}{nonce} {json.dumps(document, sort_keys=True)}"


def results_in_log(text: str, nonce: str) -> list[CandidateResult]:
    """The results a Job's log carries: lines that start with RESULT_PREFIX and this run's
    nonce (split at newlines only: a carriage return, a record separator or U+2028 in what the
    server printed starts no line here); two for one candidate are an error."""
    marker = f"{RESULT_PREFIX}{nonce} "
    found: dict[str, CandidateResult] = {}
    for line in text.split("\n"):
        if not line.startswith(marker):
            continue
        result = CandidateResult.from_json(json.loads(line[len(marker) :]))
        if result.name in found:
            raise ValueError(f"two result lines for the candidate {result.name!r}")
        found[result.name] = result
    return list(found.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", type=Path, required=True, help="the Job's job.json")
    parser.add_argument("--url", required=True, help="the sidecar's base URL")
    parser.add_argument("--log", type=Path, required=True, help="the sidecar's load log")
    args = parser.parse_args(argv)
    settings = json.loads(args.settings.read_text())
    nonce = settings.get("nonce")
    if not isinstance(nonce, str) or not nonce.isalnum():
        print(f"tune: {args.settings}: no run nonce (write the Jobs again)", file=sys.stderr)
        return 2
    api_key = os.environ.get(verify.API_KEY_ENV) or None
    result = run_job(settings, args.url, args.log, api_key)
    print(result_line(nonce, result), flush=True)
    said = verify.http_policy.printable(result.rejection or "measured")
    print(f"tune: {result.name}: {said}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
