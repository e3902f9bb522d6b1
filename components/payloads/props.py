"""Is the running server the one the stack rendered? Its own report against the render.

llama-server answers `GET /props` with its build, model path, slots and per-slot context and
chat template; vLLM answers `GET /v1/models` with the served name, model path and
`max_model_len`. The render writes what they must say as an expected-properties document
(`llm-infra-props/1`), and verify compares the server's answer with it: each mismatch is one
line with both values (`/props total_slots: 2, rendered server.parallel: 4`).

The document: `{"format": "llm-infra-props/1", "endpoint": "/props", "server": "...",
"checks": [{"path": ["total_slots"], "match": "equal", "expected": 4, "rendered":
"server.parallel"}, ...], "notes": ["..."]}`. `match` is `equal`, `build` (the answer's
`bNNNN` before the first `-`, as llama.cpp's build_info is `b<number>-<commit>`) or
`non-empty`; `rendered` names the input the expected value comes from; `notes` are what the
render could not promise (printed, never a failure). Standard library only: shipped beside
verify.py into the verify Job and onto the MI300X host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FORMAT = "llm-infra-props/1"
MATCHES = ("equal", "build", "non-empty")
MAX_SHOWN = 120
"""The most characters of one value a line shows (a chat template is kilobytes)."""


def new_props(
    endpoint: str, server: str, checks: list[dict[str, Any]], notes: list[str] | None = None
) -> dict[str, Any]:
    """An expected-properties document."""
    return {
        "format": FORMAT,
        "endpoint": endpoint,
        "server": server,
        "checks": checks,
        "notes": list(notes or []),
    }


def props_text(doc: dict[str, Any]) -> str:
    """A document as its file holds it (the verify Job's ConfigMap, the MI300X host)."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def check(
    path: list[str | int], expected: Any, rendered: str, match: str = "equal"
) -> dict[str, Any]:
    """One expected property: the answer at `path` must match `expected` (from `rendered`)."""
    if match not in MATCHES:
        raise ValueError(f"match must be one of {MATCHES}, not {match!r}")
    return {"path": list(path), "match": match, "expected": expected, "rendered": rendered}


def load_props(path: Path) -> dict[str, Any]:
    """Read and sanity-check an expected-properties file."""
    doc = json.loads(path.read_text())
    problem = document_problem(doc)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return doc  # type: ignore[no-any-return]


def document_problem(doc: Any) -> str | None:
    """What makes `doc` no expected-properties document, or None."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        return f"format is {found!r}, expected {FORMAT!r}"
    endpoint = doc.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint.startswith("/"):
        return f"endpoint {endpoint!r} is not a path"
    checks = doc.get("checks")
    if not isinstance(checks, list):
        return "checks is not a list"
    for index, item in enumerate(checks):
        if (
            not isinstance(item, dict)
            or item.get("match") not in MATCHES
            or not isinstance(item.get("path"), list)
            or not item["path"]
            or not all(isinstance(p, str | int) for p in item["path"])
        ):
            return f"checks[{index}] is not {{path, match, expected, rendered}}"
    return None


def field_name(path: list[str | int]) -> str:
    """`["data", 0, "max_model_len"]` → `data[0].max_model_len`."""
    name = ""
    for part in path:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else part)
    return name


def _at(answer: Any, path: list[str | int]) -> tuple[bool, Any]:
    value = answer
    for part in path:
        if isinstance(part, int):
            if not isinstance(value, list) or len(value) <= part:
                return False, None
        elif not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(text)} characters)"


def build_of(build_info: Any) -> str | None:
    """The `bNNNN` of llama.cpp's build_info (`b11434-36e2897`), or None."""
    if not isinstance(build_info, str):
        return None
    head = build_info.split("-", 1)[0]
    return head if head[:1] == "b" and head[1:].isdigit() else None


def check_problem(endpoint: str, item: dict[str, Any], answer: Any) -> str | None:
    """The mismatch line of one expected property, or None when the answer matches."""
    path, match, expected = item["path"], item["match"], item.get("expected")
    found, value = _at(answer, path)
    if match == "equal":
        ok = found and value == expected and type(value) is type(expected)
        want = _shown(expected)
    elif match == "build":
        ok = found and build_of(value) == expected
        want = _shown(expected)
    else:
        ok = found and isinstance(value, str | list | dict) and len(value) > 0
        want = str(expected or "present")
    if ok:
        return None
    got = "absent" if not found else _shown(value)
    if found and match == "non-empty" and not value:
        got += " (empty)"
    return f"{endpoint} {field_name(path)}: {got}, rendered {item['rendered']}: {want}"


def props_problems(doc: dict[str, Any], answer: Any) -> list[str]:
    """One line per property of `doc` the server's answer does not match, both values in it."""
    endpoint = doc["endpoint"]
    problems = []
    for item in doc["checks"]:
        problem = check_problem(endpoint, item, answer)
        if problem is not None:
            problems.append(problem)
    return problems


def summary(doc: dict[str, Any]) -> str:
    """The line of a server that matches every property."""
    names = ", ".join(field_name(item["path"]) for item in doc["checks"])
    return f"{doc['endpoint']}: as rendered ({names})"


def report(doc: dict[str, Any], answer: Any) -> tuple[bool, list[str]]:
    """(matches, lines): the mismatches (else the summary), then the document's notes."""
    problems = props_problems(doc, answer)
    notes = [f"{doc['endpoint']}: {note}" for note in doc.get("notes", [])]
    return not problems, (problems or [summary(doc)]) + notes
