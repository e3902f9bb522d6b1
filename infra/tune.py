"""Tune records: the runtime `llm-infra tune` measured fastest on a server's node.

`llm-infra tune STACK` runs the bake-off and pins its winner in `stacks/STACK.tune.json` (a fleet
server's in `STACK.SERVER.tune.json`, beside the lock, reviewed like it). A server with
`server.runtime: tuned` then renders and deploys that winner (the registry's
`with_tuned_runtimes`), checked as a runtime named in the stack file is. The record is read
strictly: every problem names the file and the field; a missing record says to run
`llm-infra tune STACK`.

    {"version": 1, "stack": "strix-halo", "server": null, "where": "local",
     "depths": [0, 32768], "runs": 3, "rule": "...",
     "current": {RUNTIME}, "winner": {RUNTIME},
     "candidates": [{"name": "...", "runtime": {RUNTIME}, "current": false,
                     "verdict": "winner|kept|slower|rejected", "reason": "...",
                     "loadSeconds": 41.2, "figures": [{"depth": 0, ...}]}]}

where RUNTIME is `Runtime.to_record()`'s `{name, image, backend, capabilities, digest}`; the
whole shape is docs/json/tune.schema.json (`components/payloads/tune_figures.py` writes it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.llamacpp.runtimes import Runtime, record_problems
from infra.config.base import ConfigError
from infra.config.fleet import FleetStack, entry_key
from infra.config.kubernetes import KubernetesStack, RuntimeSettings
from infra.config.kubernetes_checks import runtime_problems
from infra.config.limits import read_limited
from infra.config.stack import tune_path_for

TUNE_VERSION = 1
VERDICTS = ("winner", "kept", "slower", "rejected")
MAX_TUNE_FILE_BYTES = 1024 * 1024
"""A tune record: a few runtimes and their figures, a few KiB."""
_KEYS = (
    "version", "stack", "server", "where", "depths", "runs", "rule", "current", "winner",
    "candidates",
)  # fmt: skip
_CANDIDATE_KEYS = ("name", "runtime", "current", "verdict", "reason", "loadSeconds", "figures")
_OPTIONAL_KEYS = ("correctness",)
"""Verify's rule with its thresholds (records written before it have none)."""
_OPTIONAL_CANDIDATE_KEYS = ("selfCheck",)
"""The current runtime's check against its own expectations (only the current has one)."""


def tune_record_problems(
    document: object, stack: str | None = None, server: str | None = None
) -> list[str]:
    """What is wrong with a tune record (`field: problem`), the stack and server it must be
    for when given."""
    if not isinstance(document, dict):
        return [f"not a JSON object with {', '.join(_KEYS)}"]
    allowed = _KEYS + _OPTIONAL_KEYS
    problems = [
        f"{key}: unknown key (allowed: {', '.join(allowed)})"
        for key in document
        if key not in allowed
    ]
    if "correctness" in document and not isinstance(document["correctness"], str):
        problems.append(f"correctness: {document['correctness']!r:.80} is not a string")
    problems += [f"{key}: is required" for key in _KEYS if key not in document]
    version = document.get("version")
    if "version" in document and (type(version) is not int or version != TUNE_VERSION):
        problems.append(f"version: {version!r} is not {TUNE_VERSION} (the format this build reads)")
    if "stack" in document:
        named = document["stack"]
        if not isinstance(named, str) or not named:
            problems.append(f"stack: {named!r} is not a stack name")
        elif stack is not None and named != stack:
            problems.append(f"stack: {named!r}, but the record is read for stack {stack!r}")
    if "server" in document:
        named = document["server"]
        if named is not None and not isinstance(named, str):
            problems.append(f"server: {named!r} is not a server name or null")
        elif "stack" in document and named != server:
            want = "null (a single-server stack)" if server is None else repr(server)
            problems.append(f"server: {named!r}, but the record is read for server {want}")
    for key in ("current", "winner"):
        # null: no current runtime was named; no candidate passed (the record says so)
        if document.get(key) is not None:
            problems += [_field(key, f, m) for f, m in record_problems(document[key])]
    candidates = document.get("candidates")
    if "candidates" in document and not isinstance(candidates, list):
        problems.append(f"candidates: {type(candidates).__name__} is not a list")
    elif isinstance(candidates, list):
        for index, candidate in enumerate(candidates):
            problems += _candidate_problems(f"candidates[{index}]", candidate)
        winners = [
            c["runtime"] for c in candidates if isinstance(c, dict) and c.get("verdict") == "winner"
        ]
        if len(winners) > 1:
            problems.append(f"candidates: {len(winners)} have the verdict 'winner' (one may)")
        elif winners and "winner" in document and winners[0] != document["winner"]:
            problems.append("winner: is not the runtime of the candidate whose verdict is 'winner'")
    return problems


def _field(key: str, field: str, message: str) -> str:
    return f"{key}.{field}: {message}" if field else f"{key}: {message}"


def _candidate_problems(key: str, candidate: object) -> list[str]:
    if not isinstance(candidate, dict):
        return [f"{key}: not an object with {', '.join(_CANDIDATE_KEYS)}"]
    problems = [
        f"{key}.{k}: unknown key"
        for k in candidate
        if k not in _CANDIDATE_KEYS + _OPTIONAL_CANDIDATE_KEYS
    ]
    if "selfCheck" in candidate:
        from components.payloads.tune_figures import self_check_of

        try:
            self_check_of(candidate["selfCheck"])
        except ValueError as exc:
            problems.append(f"{key}.{exc}")
    problems += [f"{key}.{k}: is required" for k in _CANDIDATE_KEYS if k not in candidate]
    if "runtime" in candidate:
        problems += [
            _field(f"{key}.runtime", f, m) for f, m in record_problems(candidate["runtime"])
        ]
    verdict = candidate.get("verdict")
    if "verdict" in candidate and verdict not in VERDICTS:
        problems.append(f"{key}.verdict: {verdict!r} is not one of {', '.join(VERDICTS)}")
    if "reason" in candidate and not isinstance(candidate["reason"], str):
        problems.append(f"{key}.reason: {candidate['reason']!r} is not a string")
    if "figures" in candidate and not isinstance(candidate["figures"], list):
        problems.append(f"{key}.figures: {candidate['figures']!r} is not a list (one per depth)")
    return problems


def read_tune_record(
    path: Path, stack: str | None = None, server: str | None = None
) -> dict[str, Any]:
    """The validated record at `path`; ConfigError naming the file and each problem."""
    if not path.is_file():
        name = stack or path.name.split(".", 1)[0]
        raise ConfigError(
            [f"{path}: no tune record (run: llm-infra tune {name}, and commit its record)"]
        )
    try:
        text = read_limited(path, MAX_TUNE_FILE_BYTES, "tune record")
        document = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError([f"{path}: not a readable tune record (not JSON: {exc})"]) from None
    problems = tune_record_problems(document, stack, server)
    if problems:
        raise ConfigError([f"{path}: {problem}" for problem in problems])
    record: dict[str, Any] = document
    return record


def load_tune_record(path: Path, stack: str | None = None, server: str | None = None) -> Runtime:
    """The winner of the tune record at `path` (pinned `image@digest` when it has a digest)."""
    winner = read_tune_record(path, stack, server)["winner"]
    if winner is None:
        raise ConfigError(
            [
                f"{path}: names no winner (no candidate passed the bake-off): run llm-infra "
                "tune again, or set server.runtime to a runtime of your choice"
            ]
        )
    return Runtime.from_record(winner)


def tuned_server(stack: KubernetesStack, lock_path: Path) -> KubernetesStack:
    """A single server's stack with its record's winner, when its runtime is `tuned`."""
    if stack.server.runtime != "tuned":
        return stack
    name = lock_path.name.removesuffix(".lock.json")
    resolved, problems = _tuned(stack, tune_path_for(lock_path), name, None)
    if problems:
        raise ConfigError(problems)
    return resolved


def tuned_fleet(stack: FleetStack, lock_path: Path) -> FleetStack:
    """A fleet with each `tuned` server's runtime its own record's winner."""
    name = lock_path.name.removesuffix(".lock.json")
    servers, problems = [], []
    for index, (entry, single) in enumerate(zip(stack.servers, stack.server_stacks(), strict=True)):
        if entry.runtime != "tuned":
            servers.append(entry)
            continue
        server = entry.resource_name
        try:
            resolved, found = _tuned(single, tune_path_for(lock_path, server), name, server)
        except ConfigError as exc:
            found = exc.problems
        else:
            servers.append(entry.model_copy(update={"runtime": resolved.server.runtime}))
        problems += [entry_key(p, index, entry.memory is not None) for p in found]
    if problems:
        raise ConfigError(problems)
    return stack.model_copy(update={"servers": servers})


def _tuned(
    stack: KubernetesStack, path: Path, name: str, server: str | None
) -> tuple[KubernetesStack, list[str]]:
    """The single-server stack with its record's winner as its runtime, and that runtime's
    problems (naming `server.runtime: tuned` and the record)."""
    try:
        winner = load_tune_record(path, name, server)
    except ConfigError as exc:
        raise ConfigError([f"server.runtime: tuned: {p}" for p in exc.problems]) from None
    runtime = RuntimeSettings.model_validate(winner.to_record())
    resolved = stack.model_copy(
        update={"server": stack.server.model_copy(update={"runtime": runtime})}
    )
    where = f"tuned (the winner {winner.name!r} of {path})"
    return resolved, runtime_problems(resolved, where)
