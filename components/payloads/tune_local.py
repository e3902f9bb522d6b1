"""One bake-off candidate run on this machine: start llama-server with the stack's exact flags,
gate its load, ask for a first decode, verify its answers, measure it at each depth, stop it.

A candidate is a runtime (what the record names and `server.runtime: tuned` renders) and how to
start it here: the executable, its environment and the flags it changes (a candidate with fewer
offloaded layers, say). Every other flag is the stack's rendered argv, with the model, host,
port and load log made local. Standard library only: `llm-infra tune --local` and the GPU
machine run it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.payloads import gpu_gate, verify
from components.payloads.gate_decode import first_decode
from components.payloads.gate_ops import degradation_findings
from components.payloads.tune_figures import (
    CRASHED_FIRST_DECODE,
    CRASHED_LOADING,
    FAILED_GATE,
    FAILED_VERIFY,
    OUT_OF_MEMORY,
    CandidateResult,
    name_problem,
    self_check_summary,
    verify_rejection,
)
from components.payloads.tune_measure import depths_for, measure_depth

# What llama.cpp b11434 and the kernel say when memory runs out (ggml-backend.cpp's
# "failed to allocate", llama-model-loader's "unable to allocate", common/fit.cpp's memory fit
# giving up before it aborts, Vulkan's ErrorOutOfDeviceMemory, the kernel's SIGKILL from the
# OOM killer).
OOM_MARKERS = (
    "failed to fit params to free device memory",
    "failed to allocate",
    "unable to allocate",
    "out of memory",
    "ErrorOutOfDeviceMemory",
    "ErrorOutOfHostMemory",
    "std::bad_alloc",
)
LOG_TAIL_CHARS = 400
FIRST_DECODE_SETTLE_S = 1.0
"""How long a server must stay up after its first token."""


@dataclass
class LocalCandidate:
    """A runtime and how to start it on this machine."""

    name: str
    runtime: dict[str, Any]
    command: list[str]
    """The llama-server executable (with any wrapper before it)."""
    env: dict[str, str] = field(default_factory=dict)
    set_args: dict[str, str | None] = field(default_factory=dict)
    """Flags this candidate changes in the stack's argv (value None: the flag is removed)."""
    current: bool = False

    @property
    def backend(self) -> str:
        return str(self.runtime.get("backend", "vulkan"))


def set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with `flag`'s value replaced (added when absent; removed with its value for None).
    A flag without a value (`--jinja`) is given as value ""."""
    out = list(argv)
    if flag in out:
        at = out.index(flag)
        takes_value = at + 1 < len(out) and not out[at + 1].startswith("-")
        del out[at : at + (2 if takes_value else 1)]
    if value is None:
        return out
    return out + ([flag] if value == "" else [flag, value])


def candidate_argv(
    stack_args: Sequence[str], candidate: LocalCandidate, *, model: Path, port: int, log: Path
) -> list[str]:
    """The candidate's full argv: its command, the stack's flags made local, its changes."""
    argv = list(stack_args)
    local: dict[str, str | None] = {
        "-m": str(model), "--host": "127.0.0.1", "--port": str(port), "--log-file": str(log),
        "-lv": "4",
    }  # fmt: skip
    for flag, value in {**local, **candidate.set_args}.items():
        argv = set_flag(argv, flag, value)
    return [*candidate.command, *argv]


def _flag(argv: Sequence[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def _tail(*paths: Path) -> str:
    text = ""
    for path in paths:
        if path.is_file():
            text += path.read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-LOG_TAIL_CHARS:]


def _died(process: subprocess.Popen[bytes], out: Path, log: Path, stage: str) -> str:
    text = "".join(p.read_text(errors="replace") for p in (out, log) if p.is_file())
    code = process.returncode
    if code == -signal.SIGKILL or any(marker in text for marker in OOM_MARKERS):
        seen = next((m for m in OOM_MARKERS if m in text), "killed by SIGKILL")
        return f"{OUT_OF_MEMORY} {stage} ({seen}): {_tail(out, log)}"
    crashed = {"while loading": CRASHED_LOADING, "at the first decode": CRASHED_FIRST_DECODE}
    return f"{crashed.get(stage, 'crashed ' + stage)} (exit code {code}): {_tail(out, log)}"


def wait_loaded(process: subprocess.Popen[bytes], base_url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            verify.request_json(base_url, "/health", timeout=5.0)
            return True
        except (verify.EndpointError, OSError):
            time.sleep(0.5)
    return False


def first_decode_problem(
    base_url: str, api_key: str | None, died: Callable[[str], str | None]
) -> str | None:
    """The gate's one-token request after the load: a build that aborts in its first decode
    dies here (reported with what `died` finds), or answers with an error."""
    problem = first_decode(base_url, api_key)
    # An abort in the step after the token, or while the request is torn down, is this crash
    # too: give it a moment to show.
    deadline = time.monotonic() + FIRST_DECODE_SETTLE_S
    while time.monotonic() < deadline:
        death = died("at the first decode")
        if death:
            return death
        time.sleep(0.05)
    return None if problem is None else f"{CRASHED_FIRST_DECODE}: {problem}"


def judge_loaded(
    result: CandidateResult,
    base_url: str,
    load_log: str,
    *,
    backend: str,
    gpu_layers: str | None,
    expectations: dict[str, Any],
    depths: Sequence[int],
    runs: int,
    prefill_tokens: int,
    decode_tokens: int,
    api_key: str | None,
    died: Callable[[str], str | None],
) -> None:
    """A loaded server's gate, first decode, verify and figures, into `result` (its first
    rejection stops the rest). `died(stage)` says whether the server has died, and how."""
    result.rejection = gate_rejection(load_log, backend, gpu_layers)
    if result.rejection:
        return
    result.rejection = first_decode_problem(base_url, api_key, died)
    if result.rejection:
        return
    if result.current:
        # Before anything is judged by the rule, the current runtime against itself: its own
        # expectations, a run apart (the record, or the stack's recording, was another).
        result.self_check = self_check_summary(
            verify.verify(base_url, expectations, api_key=api_key), expectations
        )
        if not result.self_check["passed"]:
            result.rejection = f"{FAILED_VERIFY}: {result.self_check['problem']}"
            return
    result.rejection = verify_rejection(
        verify.verify(base_url, expectations, api_key=api_key), expectations
    )
    if result.rejection:
        return
    props = verify.request_json(base_url, "/props", api_key=api_key, timeout=30.0)
    slot_context = int(props.get("default_generation_settings", {}).get("n_ctx", 0))
    for depth in depths_for(
        slot_context, tuple(depths), prefill=prefill_tokens, decode=decode_tokens
    ):
        result.depths.append(
            measure_depth(
                base_url,
                depth,
                runs=runs,
                prefill_tokens=prefill_tokens,
                decode_tokens=decode_tokens,
                api_key=api_key,
            )
        )
        result.rejection = died(f"at depth {depth}")
        if result.rejection:
            return


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a grace period."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_candidate(
    candidate: LocalCandidate,
    stack_args: Sequence[str],
    *,
    model: Path,
    port: int,
    workdir: Path,
    expectations: dict[str, Any],
    depths: Sequence[int],
    runs: int = 3,
    prefill_tokens: int = 512,
    decode_tokens: int = 64,
    load_timeout: float = 1800.0,
    api_key: str | None = None,
) -> CandidateResult:
    """Start, gate, first decode, verify and measure one candidate; always stop it."""
    result = CandidateResult(candidate.name, candidate.runtime, current=candidate.current)
    log, out = workdir / f"{candidate.name}.log", workdir / f"{candidate.name}.out"
    argv = candidate_argv(stack_args, candidate, model=model, port=port, log=log)
    base_url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with out.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **candidate.env},
        )  # fmt: skip
    try:
        if not wait_loaded(process, base_url, load_timeout):
            if process.poll() is None:
                result.rejection = f"{CRASHED_LOADING}: not healthy after {load_timeout:.0f} s"
            else:
                result.rejection = _died(process, out, log, "while loading")
            return result
        result.load_seconds = time.monotonic() - started
        text = out.read_text(errors="replace") + "\n" + log.read_text(errors="replace")

        def died(stage: str) -> str | None:
            return None if process.poll() is None else _died(process, out, log, stage)

        judge_loaded(
            result, base_url, text, backend=candidate.backend, gpu_layers=_flag(argv, "-ngl"),
            expectations=expectations, depths=depths, runs=runs, prefill_tokens=prefill_tokens,
            decode_tokens=decode_tokens, api_key=api_key, died=died,
        )  # fmt: skip
        return result
    finally:
        stop(process)


def record_expectations(
    candidate: LocalCandidate,
    stack_args: Sequence[str],
    *,
    model: Path,
    port: int,
    log: Path,
    load_timeout: float = 600.0,
    into: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Verify's expectations recorded against a candidate started with the stack's flags (the
    current runtime, on a machine with no recorded expectations for this model), into the
    document `into` (its cases and tolerance; default: `verify.new_expectations()`)."""
    argv = candidate_argv(stack_args, candidate, model=model, port=port, log=log)
    process = subprocess.Popen(
        argv, env={**os.environ, **candidate.env}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        if not wait_loaded(process, url, load_timeout):
            raise RuntimeError(
                f"{candidate.name} did not load to record expectations: {_tail(log)}"
            )
        return verify.record(url, into or verify.new_expectations())
    finally:
        stop(process)


def gate_problems(text: str, backend: str, gpu_layers: str | None) -> list[str]:
    """The gate's findings on a candidate's load (stdout and log file together): a backend
    that disabled an op, whatever the backend; for a GPU backend also layers or buffers that
    are not on its devices."""
    prefix = gpu_gate.BACKEND_DEVICE_PREFIX.get(backend)
    if prefix is None:
        return degradation_findings(gpu_gate.parse_load_log(text).degraded)
    expect = None if gpu_layers in (None, "all", "-1") else int(gpu_layers or 0)
    return gpu_gate.check_log(text, expect, device_prefix=prefix).problems


def gate_rejection(text: str, backend: str, gpu_layers: str | None) -> str | None:
    """The rejection a load gets from the gate: its first finding and how many more; None when
    the gate passes."""
    problems = gate_problems(text, backend, gpu_layers)
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{FAILED_GATE}: {problems[0]}{more}"


def load_candidates(path: Path) -> list[LocalCandidate]:
    """Candidates from a JSON file: a list of {name, runtime, command, env, setArgs, current}."""
    doc = json.loads(path.read_text())
    if not isinstance(doc, list) or not doc:
        raise ValueError(f"{path}: expected a non-empty list of candidates")
    found = []
    for index, item in enumerate(doc):
        where = f"{path}: candidate {index}"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected an object")
        unknown = set(item) - {"name", "runtime", "command", "env", "setArgs", "current"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        name, runtime, command = item.get("name"), item.get("runtime"), item.get("command")
        problem = name_problem(name)
        if problem:
            raise ValueError(f"{where}: name {problem}")
        assert isinstance(name, str)
        if (
            not isinstance(runtime, dict)
            or runtime.get("backend") not in gpu_gate.BACKEND_DEVICE_PREFIX
        ):
            raise ValueError(
                f"{where} ({name}): runtime must be an object whose backend is one of "
                f"{sorted(gpu_gate.BACKEND_DEVICE_PREFIX)}"
            )
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(word, str) and word for word in command)
        ):
            raise ValueError(f"{where} ({name}): command must be a list of argv words")
        env = item.get("env", {})
        set_args = item.get("setArgs", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{where} ({name}): env must map names to strings")
        if not isinstance(set_args, dict) or not all(
            isinstance(k, str) and k.startswith("-") and (v is None or isinstance(v, str))
            for k, v in set_args.items()
        ):
            raise ValueError(f"{where} ({name}): setArgs must map flags to strings or null")
        # A runtime as the record holds it (`Runtime.to_record`): no capability, no digest
        # unless the candidate names them.
        runtime = {"capabilities": [], "digest": None, **runtime}
        found.append(
            LocalCandidate(
                name,
                runtime,
                command,
                dict(env),
                dict(set_args),
                current=bool(item.get("current", False)),
            )
        )
    names = [c.name for c in found]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: candidate names repeat: {names}")
    if sum(c.current for c in found) > 1:
        raise ValueError(f"{path}: more than one candidate is marked current")
    return found
