"""Shared fixtures (the project's stack files), the tier markers and the hypothesis profiles.

The tier marker of a test follows its directory: every test under ``tests/unit`` is marked
``unit``, ``tests/component`` ``component``, ``tests/contract`` ``contract`` (it runs real
third-party software: llama-server, Caddy, kubernetes-validate, ...) and ``tests/e2e`` ``e2e``.
Nobody sets these markers by hand (``alone``, set on a whole file, is of another kind:
``_machine_share``); a test that needs real software lives in ``tests/contract``, and outside it
starting one of those programs (``THIRD_PARTY``) is an error.
"""

from __future__ import annotations

import copy
import fcntl
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ConfigError, FleetStack, KubernetesStack, StackConfig, parse_stack
from infra.lock import ModelSource, model_source
from tests.support import profiles

# Bytecode is written whatever the environment says (some images set PYTHONDONTWRITEBYTECODE):
# pytest rewrites each test module's asserts as it imports it, and without bytecode every worker
# does that again for every module (9.6 s of collection instead of 3.5 s on a 2-core machine),
# as every `python -m infra.cli` a test starts compiles the project again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

ROOT = Path(__file__).resolve().parent.parent
STACKS = ROOT / "stacks"
TIERS = ("unit", "component", "contract", "e2e")
THIRD_PARTY = frozenset(
    {
        "actionlint", "caddy", "checkov", "ggml-rpc-server", "kubernetes-validate", "llama-server",
        "node", "promtool", "rpc-server", "shellcheck", "test-llama-archs", "vllm",
    }
)  # fmt: skip
"""The real third-party programs the renders are held to: only tests/contract starts them."""
MODEL_VOLUME: dict[str, Any] = {
    "claim_name": "models",
    "fetcher_config_map": "models-fetcher",
    "check_image": "python:3.12.8-slim-bookworm",
    "run_as_user": 10001,
}
"""A server's model volume as a GgufModelStore's `model_volume` gives it."""
PROPS_FIXTURE = ROOT / "tests" / "fixtures" / "llama_server_props" / "b11434-props.json"
"""The real /props answer of llama-server b11434 on the tiny model (-c 8192 -np 4)."""
STOCK_PYTHON = (sys.executable, "-E", "-s")
"""A plain Python as a stock image runs a shipped script: the script's folder first on the path,
where it finds the modules shipped beside it, and nothing of this checkout's environment (`-E`:
no PYTHONPATH, `-s`: no user site). That is `-I` less `-P`, which would leave the folder out."""

pytest_plugins = ["tests.support.policy", "tests.support.upgrade"]
"""Fixtures that more than one tier uses, beside the helpers they come with."""

profiles.load()  # hypothesis: `dev` by default, `ci` in .ci/test (tests/support/profiles.py)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier, the directory under tests/ it lives in; the files marked
    ``alone`` go first, so that the other workers wait for one only as their first file starts,
    not for whatever long file they are in when it comes up (`_machine_share`)."""
    for item in items:
        parts = item.path.relative_to(ROOT).parts
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[1]))
    items.sort(key=lambda item: item.get_closest_marker("alone") is None)


@pytest.fixture(scope="module", autouse=True)
def _machine_share(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, worker_id: str
) -> Iterator[None]:
    """A module marked ``alone`` runs while no other test file runs on any xdist worker.

    Its tests compare a client's clock with a server's (``llm-infra bench``): a server streaming
    a tiny model's 2,500 tokens a second to a client that other workers' servers keep off the
    CPU reaches it in bursts (a first token 0.4-0.6 s late, then the rest at once), and the
    client's figure then says nothing of the code under test. Every other module holds a shared
    lock for as long as it runs; an ``alone`` module takes it exclusively, having first closed
    a turnstile that keeps new modules from starting while it waits.
    """
    alone = request.node.get_closest_marker("alone") is not None
    where = tmp_path_factory.getbasetemp()  # the run's own (a worker's is one under it)
    where = where if worker_id == "master" else where.parent
    with open(where / "turnstile", "a") as turnstile, open(where / "machine", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


_running_tier: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Note the running test's tier (its fixtures' setup included) for `_tier_guard`."""
    parts = item.path.relative_to(ROOT).parts
    _running_tier[:] = [parts[1]] if len(parts) > 2 and parts[1] in TIERS else []
    yield
    _running_tier.clear()


_popen_init = subprocess.Popen.__init__


def _tier_guard(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
    """Popen that refuses a THIRD_PARTY program outside the contract tier: a test that runs
    one belongs there, so `-m "not contract"` runs none of them."""
    if isinstance(args, str | bytes):  # a command line (shell=True): its first word
        words = os.fsdecode(args).split()
        program = os.path.basename(words[0]) if words else ""
    else:
        argv = [args] if isinstance(args, os.PathLike) else list(args)
        program = os.path.basename(os.fsdecode(argv[0])) if argv else ""
    if program in THIRD_PARTY and _running_tier and _running_tier[0] != "contract":
        raise RuntimeError(
            f"{program} is third-party software: a {_running_tier[0]} test may not run it "
            "(move the test to tests/contract)"
        )
    _popen_init(self, args, *rest, **options)


subprocess.Popen.__init__ = _tier_guard  # type: ignore[method-assign]


@functools.cache
def _parsed(text: str) -> Any:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def stack_document(stack: str) -> dict[str, Any]:
    """A stack file of stacks/ as parsed (a fresh copy: each file is parsed once)."""
    return copy.deepcopy(_parsed((STACKS / f"Pulumi.{stack}.yaml").read_text()))


def write_stack(path: Path, document: dict[str, Any]) -> Path:
    """Write an (edited) stack document as a stack file (libyaml's emitter where PyYAML has it)."""
    path.write_text(yaml.dump(document, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    return path


def stack_values(stack: str) -> dict[str, Any]:
    """The `llm-infra:` config values of a stack file, namespace stripped (a fresh copy)."""
    document = stack_document(stack)
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}


@pytest.fixture
def strix_halo_values() -> dict[str, Any]:
    """A fresh, mutable copy of the strix-halo stack's config values."""
    return copy.deepcopy(stack_values("strix-halo"))


def unlocked_source(stack: StackConfig) -> ModelSource:
    """The model as the config names it, without a lock (what a preview deploys)."""
    model = stack.servers[0].model if isinstance(stack, FleetStack) else stack.model
    return model_source(model, ROOT / "stacks" / "no-such.lock.json", preview=True)


def strix(values: dict[str, Any]) -> KubernetesStack:
    """Validate kubernetes-target values (as `parse_stack`), typed as that target's model."""
    stack = parse_stack(values)
    assert isinstance(stack, KubernetesStack)
    return stack


def problems_of(values: dict[str, Any]) -> list[str]:
    """The problems `parse_stack` refuses `values` with (it must refuse them)."""
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    return caught.value.problems
