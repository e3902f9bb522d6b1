# Past ~400 lines on purpose: shipped as one file, with only http_policy.py and props.py beside it.
"""``llm-infra verify``: is the deployed model answering like the recorded reference?

Sends a fixed set of prompts (temperature 0, fixed seed) to an OpenAI-compatible endpoint
and compares each answer with an expectations file: exact text, optional ``contains`` /
``regex`` checks written by hand, and - where the server returns ``logprobs`` - the decisive
rule: the greedy tokens must agree with the recorded reference at every position where the
reference was decisive (its top-1 beat its top-2 by at least ``decisive_margin`` nats), with
the chosen tokens' logprobs within ``logprob_abs``. Different kernels give slightly different
floats (seed 002), so a divergence where the reference was a near-tie, to a token the
reference also ranked, is numerical noise: that case is compared up to there, and at least
``min_compared`` of all reference tokens must be compared before such a tie. Standard library
only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or "components.payloads" in sys.modules:
    from components.payloads import http_policy as http_policy  # bench's too
    from components.payloads import props as props
else:  # a script beside http_policy.py, props.py: its folder is first on sys.path (unless -I, -P)
    import http_policy
    import props

FORMAT = "llm-infra-verify/1"
API_KEY_ENV = "LLM_INFRA_API_KEY"

# Short, deterministic tasks a working chat model answers the same way every time; on the
# real model the recorded text doubles as a human-readable sanity check.
DEFAULT_CASES: list[dict[str, Any]] = [
    {
        "id": "arithmetic",
        "messages": [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}],
    },
    {
        "id": "capital",
        "messages": [
            {"role": "user", "content": "What is the capital of France? Answer with one word."}
        ],
    },
    {
        "id": "count",
        "messages": [{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
    },
    {
        "id": "reverse",
        "messages": [{"role": "user", "content": "Write the word 'strawberry' backwards."}],
    },
    {
        "id": "code",
        "messages": [
            {"role": "user", "content": "Write a Python one-liner that prints the squares of 1..5."}
        ],
    },
    {
        "id": "system",
        "messages": [
            {"role": "system", "content": "You reply in French."},
            {"role": "user", "content": "Say good morning."},
        ],
    },
]
DEFAULT_REQUEST: dict[str, Any] = {
    "temperature": 0.0,
    "seed": 1234,
    "max_tokens": 32,
    "top_logprobs": 5,
}
DEFAULT_TOLERANCE: dict[str, float] = {
    "logprob_abs": 0.5,
    # The decisive rule (docs/verify-and-bench.md): a divergence fails the case where the
    # reference's top-1 logprob beat its top-2 by at least this many nats; below it the
    # reference was a near-tie that numerically equivalent kernels may flip.
    "decisive_margin": 0.5,
    # At least this share of all reference tokens must be compared (before a tolerated tie):
    # a run that ties early everywhere shows too little to pass.
    "min_compared": 0.5,
    # A silent CPU fallback gives the same answers but decodes several times slower: fail
    # below this fraction of the decode speed recorded on the trusted (GPU) deployment.
    "min_decode_fraction": 0.5,
}


MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The largest JSON answer read (a completion of a few hundred tokens with logprobs is far
smaller): a server that sends more gets an error, not the client's memory."""


class EndpointError(RuntimeError):
    """The endpoint answered with an HTTP error or something that is not a completion."""


def request_json(
    base_url: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    api_key: str | None = None,
    timeout: float = 300.0,
) -> Any:
    """GET (``body`` None) or POST JSON to ``base_url + path`` and return the decoded answer,
    under the HTTP client policy: the key only to this host, a bounded answer, `timeout` the
    deadline of the whole exchange."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    # A completion's head comes only when it is done: the deadline bounds the wait, not a rate.
    limits = http_policy.Limits(
        deadline_s=timeout, head_timeout_s=timeout, stall_s=timeout, min_rate=0.0
    )
    try:
        with http_policy.request(
            base_url.rstrip("/") + path,
            method="GET" if data is None else "POST",
            headers=headers,
            token=api_key or None,
            body=data,
            max_body=MAX_ANSWER_BYTES,
            limits=limits,
        ) as response:
            return response.json()
    except http_policy.HttpError as exc:
        raise EndpointError(str(exc)) from None


def field_of(answer: Any, path: str, *keys: str | int) -> Any:
    """answer[keys[0]][keys[1]]...; an EndpointError naming what is missing otherwise."""
    value = answer
    walked = ""
    for key in keys:
        walked += f"[{key!r}]"
        if isinstance(key, int):
            ok = isinstance(value, list) and len(value) > key
        else:
            ok = isinstance(value, dict) and key in value
        if not ok:
            shown = http_policy.shorten(json.dumps(answer), 120)
            raise EndpointError(f"{path}: the answer has no {walked}: {shown}")
        value = value[key]
    return value


def model_id(base_url: str, api_key: str | None = None) -> str:
    """The first model id of ``/v1/models`` (llama-server: the ``--alias``)."""
    answer = request_json(base_url, "/v1/models", api_key=api_key, timeout=30.0)
    return str(field_of(answer, "/v1/models", "data", 0, "id"))


@dataclass
class TokenStep:
    """One generated token: its text, logprob, and the alternatives the server listed.

    llama-server also sends token ids; they are compared when present because the text of a
    token can be empty or merged with the next one where it splits a UTF-8 character.
    """

    token: str
    logprob: float
    top: list[tuple[str, float]]
    token_id: int | None = None
    top_ids: list[int] | None = None

    @property
    def key(self) -> int | str:
        """Identity of the chosen token: its id, else its text."""
        return self.token if self.token_id is None else self.token_id

    @property
    def top1(self) -> int | str:
        """Identity of the most likely token (the chosen one under greedy decoding)."""
        if not self.top:
            return self.key
        best = max(range(len(self.top)), key=lambda i: self.top[i][1])
        if self.top_ids is not None and len(self.top_ids) == len(self.top):
            return self.top_ids[best]
        return self.top[best][0]

    def to_json(self) -> dict[str, Any]:
        """The reference form stored in the expectations file."""
        out: dict[str, Any] = {
            "token": self.token,
            "logprob": self.logprob,
            "top": [list(t) for t in self.top],
        }
        if self.token_id is not None:
            out["id"] = self.token_id
        if self.top_ids is not None:
            out["top_ids"] = self.top_ids
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenStep:
        """Inverse of ``to_json``."""
        top = [(str(t), float(lp)) for t, lp in d["top"]]
        return cls(str(d["token"]), float(d["logprob"]), top, d.get("id"), d.get("top_ids"))


@dataclass
class Completion:
    """Text and per-token logprobs (empty when the server sent none)."""

    text: str
    steps: list[TokenStep] = field(default_factory=list)
    finish_reason: str | None = None
    decode_tps: float | None = None
    """Decode speed: the server's own `timings.predicted_per_second` (llama-server), else
    completion tokens over the request's wall time (prefill included: a floor, not a figure)."""


def _steps(logprobs: Any) -> list[TokenStep]:
    """Parse both shapes: ``{"content": [...]}`` (chat; llama-server everywhere) and legacy."""
    if not isinstance(logprobs, dict):
        return []
    content = logprobs.get("content")
    if isinstance(content, list):
        steps = []
        for item in content:
            tops = item.get("top_logprobs") or []
            ids = [t.get("id") for t in tops]
            step = TokenStep(
                token=str(item.get("token", "")),
                logprob=float(item.get("logprob", 0.0)),
                top=[(str(t["token"]), float(t["logprob"])) for t in tops],
                token_id=item.get("id"),
                top_ids=ids if all(isinstance(i, int) for i in ids) else None,
            )
            steps.append(step)
        return steps
    tokens, lps = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if isinstance(tokens, list) and isinstance(lps, list):
        tops = logprobs.get("top_logprobs") or [{}] * len(tokens)
        return [
            TokenStep(str(t), float(lp), [(str(k), float(v)) for k, v in (top or {}).items()])
            for t, lp, top in zip(tokens, lps, tops, strict=False)
        ]
    return []


def complete(
    base_url: str,
    case: dict[str, Any],
    request: dict[str, Any],
    *,
    model: str,
    endpoint: str = "chat",
    api_key: str | None = None,
) -> Completion:
    """Send one case with the fixed request parameters and parse text + logprobs."""
    started = time.monotonic()
    params = {**request, **case.get("request", {})}
    top_k = int(params.pop("top_logprobs", 0))
    body: dict[str, Any] = {"model": model, "stream": False, **params}
    if endpoint == "chat":
        body["messages"] = case["messages"]
        if top_k:
            body |= {"logprobs": True, "top_logprobs": top_k}
        answer = request_json(base_url, "/v1/chat/completions", body, api_key=api_key)
        if not isinstance(answer, dict):
            raise EndpointError(
                f"/v1/chat/completions: the answer is not an object: {answer!r:.80}"
            )
        path = "/v1/chat/completions"
        choice = field_of(answer, path, "choices", 0)
        message = field_of(answer, path, "choices", 0, "message")
        if not isinstance(message, dict):
            raise EndpointError(f"{path}: a malformed answer (choices[0].message {message!r:.80})")
        text = message.get("content") or ""
    elif endpoint == "completions":
        body["prompt"] = case.get("prompt") or "\n".join(m["content"] for m in case["messages"])
        if top_k:
            body["logprobs"] = top_k
        answer = request_json(base_url, "/v1/completions", body, api_key=api_key)
        path = "/v1/completions"
        choice = field_of(answer, path, "choices", 0)
        text = choice.get("text") or "" if isinstance(choice, dict) else ""
    else:
        raise ValueError(f"endpoint must be 'chat' or 'completions', not {endpoint!r}")
    elapsed = time.monotonic() - started
    try:
        tps = (answer.get("timings") or {}).get("predicted_per_second")
        if tps is None:
            tokens = (answer.get("usage") or {}).get("completion_tokens")
            tps = tokens / elapsed if tokens and elapsed > 0 else None
        return Completion(
            str(text),
            _steps(choice.get("logprobs")),
            choice.get("finish_reason"),
            tps and float(tps),
        )
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        shown = http_policy.shorten(json.dumps(answer), 120)
        raise EndpointError(f"{path}: a malformed answer ({exc!r}): {shown}") from None


@dataclass
class CaseResult:
    """Outcome of one case: every check that ran, and why it failed."""

    case_id: str
    text: str
    decode_tps: float | None = None
    text_ok: bool | None = None
    agreement: tuple[int, int] | None = None
    max_logprob_delta: float | None = None
    tie: Divergence | None = None
    """A tolerated near-tie: where the case stopped being compared, and the margin there."""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.problems


@dataclass(frozen=True)
class Divergence:
    """The first position where the current greedy token differs from the reference's."""

    position: int
    margin: float | None
    """The reference's top-1 over top-2 logprob there, in nats (None: it listed one token)."""
    ranked: bool
    """The current token (or the end of the answer) is one the reference also ranked."""

    unreported: bool = False
    """The reference's token here was a piece of a UTF-8 character that llama-server held
    back and reported no probabilities for (its text reached the next step's): nothing shows
    the reference was decisive, so the comparison ends here as at a tie."""

    def is_tie(self, decisive_margin: float) -> bool:
        """A near-tie the rule tolerates: the reference was not decisive there and the
        current token was one of its candidates (or the reference reported no probabilities
        there)."""
        if self.unreported:
            return True
        return self.ranked and self.margin is not None and self.margin < decisive_margin


@dataclass(frozen=True)
class Comparison:
    """The current steps against the reference, up to their first divergence."""

    compared: int
    """Positions whose greedy token agrees (the common greedy prefix)."""
    total: int
    max_logprob_delta: float
    divergence: Divergence | None
    unscored: int = 0
    """Of the compared positions, those the server gave no probabilities for (under
    speculative decoding llama-server b11434 reports a drafted token the target accepted with
    logprob 0.0 and no top_logprobs): compared by identity only, their logprobs not at all."""


def margin(step: TokenStep) -> float | None:
    """How decisive a reference step was: its top-1 logprob minus its top-2, in nats."""
    values = sorted((lp for _, lp in step.top), reverse=True)
    return values[0] - values[1] if len(values) >= 2 else None


def _merged(text: str) -> bool:
    """A step's text carries tokens the server held back before its own: llama-server reports
    no step for a token that ends inside a UTF-8 character and adds its text (U+FFFD) to the
    next reported step's, so the text is U+FFFD followed by more (a piece reported on its own,
    an invalid byte, is U+FFFD alone and has a step of its own)."""
    first = text.find("\ufffd")
    return first >= 0 and any(c != "\ufffd" for c in text[first:])


def _piece(text: str) -> bool:
    """A candidate's text is a piece of a character (U+FFFD, or nothing)."""
    return not text or "\ufffd" in text


def _ranked(reference: TokenStep, current: TokenStep | None) -> bool:
    """The current step's token is among the reference's listed candidates (an answer that
    ended here: the reference's candidates are the only evidence, so it counts as ranked).

    A current step that carries held-back pieces where the reference's did not chose a piece
    at this position (its id is not reported): ranked when the reference listed a piece among
    its candidates."""
    if current is None:
        return True
    if _merged(current.token) and not _merged(reference.token):
        return any(_piece(text) for text, _ in reference.top)
    if current.token_id is not None and reference.top_ids is not None:
        return current.token_id in reference.top_ids
    return current.token in [text for text, _ in reference.top]


def compare_steps(reference: list[TokenStep], current: list[TokenStep]) -> Comparison:
    """The common greedy prefix, the largest logprob difference in it, and the first
    divergence (where, how decisive the reference was there, whether the current token was
    one of the reference's candidates).

    Positions after the first divergence see different contexts, so they are not compared.
    A position the current server gave no probabilities for (a drafted token under speculative
    decoding) is compared by its token only. A step's text is compared beside its id: the same
    id with another text means tokens the server held back before it (pieces of a UTF-8
    character) differ.
    """
    agree, delta, unscored = 0, 0.0, 0
    for i, ref in enumerate(reference):
        got = current[i] if i < len(current) else None
        if got is None or got.top1 != ref.top1 or got.key != ref.key or got.token != ref.token:
            unreported = got is not None and _merged(ref.token) and ref.token != got.token
            return Comparison(
                agree,
                len(reference),
                delta,
                Divergence(i, margin(ref), _ranked(ref, got), unreported),
                unscored,
            )
        agree += 1
        if got.top or not ref.top:
            delta = max(delta, abs(got.logprob - ref.logprob))
        else:
            unscored += 1
    return Comparison(agree, len(reference), delta, None, unscored)


def check_case(case: dict[str, Any], got: Completion, tolerance: dict[str, float]) -> CaseResult:
    """Apply the case's expectations and its logprob reference to one completion.

    With a logprob reference the decisive rule decides the tokens: a divergence fails where
    the reference was decisive (top-1 over top-2 >= ``decisive_margin`` nats) or where the
    current token was not among the reference's candidates; a tolerated near-tie ends the
    comparison there, and the recorded text is then compared only up to it (the greedy text
    after a tie is another, equally valid, continuation)."""
    result = CaseResult(case_id=str(case["id"]), text=got.text)
    ref_steps = [TokenStep.from_json(s) for s in case.get("reference", {}).get("steps", [])]
    if ref_steps:
        if not got.steps and got.text and set(got.text) == {"\ufffd"}:
            result.problems.append(
                f"the reference has logprobs but the server returned none for an answer of "
                f"{len(got.text)} U+FFFD alone: each token it chose ends inside a UTF-8 "
                "character, which llama-server reports no step for"
            )
        elif not got.steps:
            result.problems.append(
                "the reference has logprobs but the server returned none "
                "(request logprobs/top_logprobs unsupported or dropped?)"
            )
        else:
            compared = compare_steps(ref_steps, got.steps)
            result.agreement = (compared.compared, compared.total)
            result.max_logprob_delta = compared.max_logprob_delta
            div = compared.divergence
            need = float(tolerance["decisive_margin"])
            if div is not None and div.is_tie(need):
                result.tie = div
            elif div is not None:
                shown = "unknown" if div.margin is None else f"{div.margin:.3f}"
                why = (
                    f"the reference was decisive there (top-1 over top-2 by {shown} nats, "
                    f"ties are below {need:g})"
                    if div.ranked
                    else "to a token the reference did not rank"
                )
                result.problems.append(
                    f"top token diverges at token {div.position} of {compared.total}: {why}"
                )
            if compared.max_logprob_delta > tolerance["logprob_abs"]:
                result.problems.append(
                    f"logprob differs by {compared.max_logprob_delta:.3f} > "
                    f"{tolerance['logprob_abs']} nats"
                )
    expect = case.get("expect", {})
    if "exact" in expect:
        want = str(expect["exact"])
        if result.tie is not None:
            # Up to the tie the texts are the same tokens; after it, another continuation.
            # A token that splits a UTF-8 character has no text of its own (llama-server
            # empties or merges it, or shows U+FFFD): the text is compared up to the first.
            prefix = ""
            for step in ref_steps[: result.tie.position]:
                if not step.token or "\ufffd" in step.token:
                    break
                prefix += step.token
            result.text_ok = got.text.startswith(prefix) and want.startswith(prefix)
        else:
            result.text_ok = got.text == want
        if not result.text_ok:
            result.problems.append(f"text {got.text!r} != expected {want!r}")
    for needle in expect.get("contains", []):
        if needle not in got.text:
            result.problems.append(f"text does not contain {needle!r}")
    if "regex" in expect and not re.search(expect["regex"], got.text):
        result.problems.append(f"text does not match /{expect['regex']}/")
    if not expect and not ref_steps:
        result.problems.append("case has neither expectations nor a reference: run --record")
    return result


def evidence_problem(results: list[CaseResult], tolerance: dict[str, float]) -> str | None:
    """Too little compared: the cases' near-ties came so early that under ``min_compared`` of
    the reference tokens were compared (a check that compared nothing must not pass)."""
    counted = [r.agreement for r in results if r.agreement is not None]
    total = sum(t for _, t in counted)
    if not total:
        return None
    compared = sum(a for a, _ in counted)
    need = float(tolerance["min_compared"])
    if compared < need * total:
        return (
            f"compared {compared} of {total} reference tokens before the near-ties, need "
            f"{need:.0%}: too little agreement to pass"
        )
    return None


def load_expectations(path: Path) -> dict[str, Any]:
    """Read and sanity-check an expectations file."""
    doc: dict[str, Any] = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format is {doc.get('format')!r}, expected {FORMAT!r}")
    if not doc.get("cases"):
        raise ValueError(f"{path}: no cases")
    return doc


def new_expectations(cases: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A fresh expectations document (default cases, request and tolerance), unrecorded."""
    return {
        "format": FORMAT,
        "endpoint": "chat",
        "model": None,
        "request": dict(DEFAULT_REQUEST),
        "tolerance": dict(DEFAULT_TOLERANCE),
        "cases": [dict(c) for c in (cases or DEFAULT_CASES)],
    }


def record(
    base_url: str,
    doc: dict[str, Any],
    *,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Run every case and store its text as ``exact`` and its logprobs as the reference.

    Hand-written ``contains``/``regex`` expectations are kept.
    """
    model = doc.get("model") or model_id(base_url, api_key)
    warm_up(base_url, doc, model=model, api_key=api_key)
    out = {**doc, "cases": []}
    speeds: list[float | None] = []
    for case in doc["cases"]:
        got = complete(
            base_url,
            case,
            doc["request"],
            model=model,
            endpoint=doc.get("endpoint", "chat"),
            api_key=api_key,
        )
        expect = {k: v for k, v in case.get("expect", {}).items() if k != "exact"}
        new = {k: v for k, v in case.items() if k not in ("expect", "reference")}
        new["expect"] = {"exact": got.text, **expect}
        if got.steps:
            new["reference"] = {"steps": [step.to_json() for step in got.steps]}
        out["cases"].append(new)
        speeds.append(got.decode_tps)
    out["recorded"] = {
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "base_url": base_url,
        "model": model,
        "decode_tps": median_speed(speeds),
    }
    return out


def warm_up(base_url: str, doc: dict[str, Any], *, model: str, api_key: str | None) -> None:
    """One throwaway request: the first after a load compiles GPU pipelines (slow, not steady)."""
    # A failure here is the measured requests' to report.
    with contextlib.suppress(EndpointError, KeyError, IndexError, OSError):
        complete(base_url, doc["cases"][0], doc["request"], model=model,
                 endpoint=doc.get("endpoint", "chat"), api_key=api_key)  # fmt: skip


def median_speed(speeds: list[float | None]) -> float | None:
    """The median of the decode speeds that were measured."""
    present = sorted(v for v in speeds if v)
    return present[len(present) // 2] if present else None


def tolerance_of(doc: dict[str, Any]) -> dict[str, float]:
    """The document's tolerance over the defaults (a file recorded before the decisive rule
    gets the rule's default thresholds; its old `min_top1_agreement` is not read)."""
    return {**DEFAULT_TOLERANCE, **doc.get("tolerance", {})}


def rule_line(tolerance: dict[str, float]) -> str:
    """The rule and its thresholds, as printed under the table."""
    return (
        f"rule: greedy tokens agree wherever the reference's top-1 beat its top-2 by >= "
        f"{float(tolerance['decisive_margin']):g} nats; chosen logprobs within "
        f"{float(tolerance['logprob_abs']):g} nats; >= {float(tolerance['min_compared']):.0%} "
        "of the reference tokens compared"
    )


def verify(
    base_url: str,
    doc: dict[str, Any],
    *,
    api_key: str | None = None,
) -> list[CaseResult]:
    """Run every case of an expectations document and check it."""
    model = doc.get("model") or model_id(base_url, api_key)
    tolerance = tolerance_of(doc)
    warm_up(base_url, doc, model=model, api_key=api_key)
    results = []
    for case in doc["cases"]:
        try:
            got = complete(
                base_url,
                case,
                doc["request"],
                model=model,
                endpoint=doc.get("endpoint", "chat"),
                api_key=api_key,
            )
        except (EndpointError, KeyError, IndexError, OSError) as exc:
            results.append(CaseResult(str(case["id"]), "", problems=[f"request failed: {exc}"]))
            continue
        result = check_case(case, got, tolerance)
        result.decode_tps = got.decode_tps
        results.append(result)
    return results


def decode_floor_problem(results: list[CaseResult], floor: float) -> str | None:
    """A median decode speed below the floor: the server may be running on the CPU."""
    median = median_speed([r.decode_tps for r in results])
    if median is None:
        return "decode speed: the server reported no timings and no token usage"
    if median < floor:
        return (
            f"decode speed: median {median:.1f} tok/s is below the floor of {floor:g} tok/s "
            "(a GPU fallback to the CPU, or a slower build)"
        )
    return None


def recorded_speed_problem(
    results: list[CaseResult], doc: dict[str, Any], fraction: float
) -> tuple[str | None, str]:
    """(problem, report line): the median decode speed against the one recorded with the file.

    The reference is recorded on a deployment you trust, on its GPU; a silent fallback to the
    CPU answers the same text and logprobs, only several times slower, so the speed is the
    signal. An old file without a recorded speed, or ``fraction`` 0, checks nothing.
    """
    recorded = (doc.get("recorded") or {}).get("decode_tps")
    if not recorded or fraction <= 0:
        return None, "decode speed vs the recording: not checked (no speed recorded: --record)"
    median = median_speed([r.decode_tps for r in results])
    if median is None:
        return "decode speed: the server reported no timings and no token usage", ""
    share = median / float(recorded)
    line = (
        f"decode speed: median {median:.1f} tok/s, {share:.0%} of the {float(recorded):.1f} "
        f"tok/s recorded (need {fraction:.0%})"
    )
    if share < fraction:
        return f"{line}: the server may have fallen back to the CPU (no usable GPU)", line
    return None, line


def props_lines(
    base_url: str, doc: dict[str, Any], *, api_key: str | None = None
) -> tuple[bool, list[str]]:
    """(matches, report lines): the server's own report (`doc["endpoint"]`) against the
    rendered properties; a failed request is a mismatch."""
    try:
        answer = request_json(base_url, doc["endpoint"], api_key=api_key, timeout=30.0)
    except (EndpointError, OSError) as exc:
        return False, [f"{doc['endpoint']}: request failed: {exc}"]
    return props.report(doc, answer)


def format_table(results: list[CaseResult]) -> str:
    """A fixed-width pass/fail table, one row per case, problems indented below."""
    rows = [("case", "text", "top-1 agree", "max |dlogp|", "result")]
    for r in results:
        text = "-" if r.text_ok is None else ("match" if r.text_ok else "DIFF")
        if r.text_ok and r.tie is not None:
            text = "to tie"  # the same text up to the tie; another continuation after it
        agree = "-" if r.agreement is None else f"{r.agreement[0]}/{r.agreement[1]}"
        if r.tie is not None and r.tie.margin is not None:
            agree += f" (tie {r.tie.margin:.3f})"
        elif r.tie is not None:
            agree += " (tie)"
        delta = "-" if r.max_logprob_delta is None else f"{r.max_logprob_delta:.4f}"
        rows.append((r.case_id, text, agree, delta, "PASS" if r.ok else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    for r in results:
        lines += [f"  {r.case_id}: {p}" for p in r.problems]
    passed = sum(r.ok for r in results)
    lines.append(f"{passed}/{len(results)} cases passed")
    return "\n".join(lines)


def key_from_env_file(path: Path) -> str:
    """The API key of a `NAME='value'` env file, so the key never passes through argv; `#`
    lines are comments, as compose reads them."""
    values = {}
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep:
            values[name.strip()] = value.strip().strip("'\"")
    for name in ("LLM_INFRA_API_KEY", "VLLM_API_KEY"):
        if values.get(name):
            return values[name]
    raise KeyError("LLM_INFRA_API_KEY or VLLM_API_KEY")


def add_options(parser: argparse.ArgumentParser, *, default_expect: str | None = None) -> None:
    """verify's options (all but the endpoint), for its own command line and `llm-infra verify`.

    `default_expect` describes where --expect defaults to; without one, --expect is required.
    """
    parser.add_argument(
        "--expect",
        type=Path,
        required=default_expect is None,
        help="expectations JSON" + (f" (default: {default_expect})" if default_expect else ""),
    )
    parser.add_argument("--record", action="store_true", help="(re)write the reference")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"bearer token (default: ${API_KEY_ENV})",
    )
    parser.add_argument(
        "--api-key-env-file",
        type=Path,
        help="an env file with VLLM_API_KEY= or LLM_INFRA_API_KEY= (the MI300X host's 0600 "
        "file; default: none)",
    )
    parser.add_argument(
        "--min-decode-tps",
        type=float,
        help="fail when the median decode tok/s is below this (default: the stack's floor, "
        "else no floor)",
    )
    parser.add_argument(
        "--props",
        type=Path,
        help="the server properties the render expects (llm-infra-props/1: llama-server's "
        "/props, vLLM's /v1/models), checked before the cases (default: "
        + ("computed from the stack)" if default_expect else "none)"),
    )
    parser.add_argument("--model", help="model name to send (default: /v1/models data[0].id)")
    parser.add_argument(
        "--api",
        choices=["chat", "completions"],
        help="the API to ask: /v1/chat/completions or /v1/completions (default: the file's)",
    )


def say(*parts: object, file: Any = None) -> None:
    """print(), with a peer's control characters shown as escapes."""
    print(*(http_policy.printable(str(part)) for part in parts), file=file)


def run(
    base_url: str, args: argparse.Namespace, expected_props: dict[str, Any] | None = None
) -> int:
    """Record or check the expectations against the endpoint; 0 all pass, 1 fail, 2 bad input.

    `expected_props` (else `--props`): what the server must report of itself; checked when
    verifying (not when recording). What the server sent is printed with its control characters
    escaped (`http_policy.printable`)."""
    if args.api_key_env_file:
        try:
            args.api_key = key_from_env_file(args.api_key_env_file)
        except (OSError, KeyError) as exc:
            say(f"llm-infra verify: no API key in {args.api_key_env_file}: {exc}", file=sys.stderr)
            return 2
    try:
        if args.record:
            doc = load_expectations(args.expect) if args.expect.exists() else new_expectations()
        else:
            doc = load_expectations(args.expect)
        if expected_props is None and args.props is not None:
            expected_props = props.load_props(args.props)
    except (OSError, ValueError) as exc:
        say(f"llm-infra verify: {exc}", file=sys.stderr)
        return 2
    if args.model:
        doc["model"] = args.model
    if args.api:
        doc["endpoint"] = args.api
    try:
        if args.record:
            recorded = record(base_url, doc, api_key=args.api_key)
            args.expect.write_text(json.dumps(recorded, indent=2, ensure_ascii=False) + "\n")
            say(f"recorded {len(recorded['cases'])} cases to {args.expect}")
            return 0
        props_ok = True
        if expected_props is not None:
            props_ok, lines = props_lines(base_url, expected_props, api_key=args.api_key)
            say("\n".join(lines))
        results = verify(base_url, doc, api_key=args.api_key)
    except (EndpointError, OSError, KeyError) as exc:
        say(f"llm-infra verify: {exc}", file=sys.stderr)
        return 1
    say(format_table(results))
    tolerance = tolerance_of(doc)
    say(rule_line(tolerance))
    evidence = evidence_problem(results, tolerance)
    if evidence:
        say(evidence)
    ok = props_ok and all(r.ok for r in results) and evidence is None
    fraction = tolerance["min_decode_fraction"]
    problem, line = recorded_speed_problem(results, doc, float(fraction))
    say(problem or line)
    ok = ok and problem is None
    if args.min_decode_tps is not None:
        problem = decode_floor_problem(results, args.min_decode_tps)
        say(problem or f"decode speed: at or above the floor of {args.min_decode_tps:g} tok/s")
        ok = ok and problem is None
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """CLI: ``verify.py BASE_URL --expect FILE [--props FILE] [--record] [--api-key K]``; 0 all
    pass, 1 fail."""
    parser = argparse.ArgumentParser(prog="verify.py", description=__doc__.splitlines()[0])
    parser.add_argument("base_url", help="e.g. http://127.0.0.1:8080 (no /v1)")
    add_options(parser)
    args = parser.parse_args(argv)
    return run(args.base_url, args)


if __name__ == "__main__":
    sys.exit(main())
