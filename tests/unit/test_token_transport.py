"""An HF token never goes to a plain-http hub endpoint unless that is stated."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.k8s.metadata import Meta
from components.model_store.manifests import fetch_job
from components.payloads import FETCHER_SOURCE
from components.payloads.fetcher import EXIT_USAGE, token_over_http_problem
from infra.config import ConfigError, parse_stack
from infra.config.secrets import token_transport_problems
from infra.lock import resolve_lock
from tests.conftest import stack_values

MIRROR = "http://mirror.lan:8080"


@pytest.mark.parametrize(
    ("endpoint", "token", "allowed", "refused"),
    [
        (MIRROR, True, False, True),
        (MIRROR, True, True, False),
        (MIRROR, False, False, False),
        ("https://mirror.lan", True, False, False),
        ("http://127.0.0.1:9000", True, False, False),
        ("http://localhost:9000", True, False, False),
    ],
    ids=["http-token", "stated", "no-token", "https", "loopback", "localhost"],
)
def test_the_rule(endpoint: str, token: bool, allowed: bool, refused: bool) -> None:
    problem = token_over_http_problem(endpoint, token, allowed)
    assert (problem is not None) is refused
    if refused:
        assert "plain http and an HF token is set" in str(problem)


def test_the_fetcher_refuses_before_any_request(tmp_path: Path) -> None:
    env = {**os.environ, "HF_ENDPOINT": MIRROR, "HF_TOKEN": "hf_secret"}
    lock = tmp_path / "lock.json"
    lock.write_text("{}")
    result = subprocess.run(
        [sys.executable, str(FETCHER_SOURCE), "fetch", "--lock", str(lock), "--dest",
         str(tmp_path / "m")],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == EXIT_USAGE
    assert f"HF_ENDPOINT '{MIRROR}' is plain http" in result.stdout
    assert "hf_secret" not in result.stdout + result.stderr


def test_the_stack_refuses_an_http_mirror_with_a_token_unless_stated() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["store"]["hfEndpoint"] = MIRROR
    stack = parse_stack(values)
    (problem,) = token_transport_problems(stack, has_token=True)
    assert problem.startswith("store.hfEndpoint: 'http://mirror.lan:8080' is plain http")
    assert token_transport_problems(stack, has_token=False) == []
    values["store"]["allowTokenOverHttp"] = True
    assert token_transport_problems(parse_stack(values), has_token=True) == []


def test_the_fleet_names_the_entry() -> None:
    values = copy.deepcopy(stack_values("strix-halo-pair"))
    values["servers"][1]["store"]["hfEndpoint"] = MIRROR
    (problem,) = token_transport_problems(parse_stack(values), has_token=True)
    assert problem.startswith("servers[1].store.hfEndpoint:")


def test_lock_refuses_before_any_request() -> None:
    stack = parse_stack(copy.deepcopy(stack_values("strix-halo")))
    with pytest.raises(ConfigError, match=re.escape(f"--endpoint '{MIRROR}' is plain http")):
        resolve_lock(stack.model, token="hf_secret", endpoint=MIRROR)  # type: ignore[union-attr]


def test_the_fetch_job_states_it_only_when_allowed() -> None:
    def args(allowed: bool) -> list[str]:
        job = fetch_job(
            Meta("f", "llm", {}), image="python:3.12.8-slim-bookworm", claim_name="c",
            config_map="cm", node_selector={}, retired=[], parallel=3, timeout_seconds=60,
            hf_endpoint=MIRROR, token_secret="s", allow_token_over_http=allowed,
        )  # fmt: skip
        (container,) = job["spec"]["template"]["spec"]["containers"]
        return list(container.get("args", [])) + list(container.get("command", []))

    assert "--allow-token-over-http" in args(True)
    assert "--allow-token-over-http" not in args(False)
