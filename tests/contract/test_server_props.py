"""The real llama-server b11434's `/props` against the properties the render expects.

The server runs the argv the strix-halo stack renders (`server_argv`), with only what this
machine needs changed in the args it is built from (the tiny model's path, a context and slot
count the CPU serves, a free loopback port, two threads, no GPU gate): the same args make
the expected properties (`expected_props`), as the verify Job gets them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.k8s.metadata import Meta
from components.k8s.verify_job import verify_config_map, verify_job
from components.llamacpp.expected_props import expected_props
from components.llamacpp.manifests import server_argv
from components.payloads import (
    HTTP_POLICY_SOURCE,
    PROPS_SOURCE,
    VERIFY_MOUNT,
    VERIFY_SOURCE,
    props,
    verify,
)
from infra.config.feeds import fed
from infra.targets.kubernetes import server_args
from tests.conftest import MODEL_VOLUME, PROPS_FIXTURE, STOCK_PYTHON, strix, unlocked_source
from tests.support.llama_server import free_port, get_json, run_llama_server
from tests.support.tiny_gguf import write_tiny_split_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_split_model(tmp_path_factory.mktemp("props-model"), "tiny")[0]


def rendered_args(values: dict[str, Any], model: Path) -> Any:
    """The strix-halo stack's server args, sized for the tiny model on this machine's CPU."""
    values["server"]["gpuGate"] = False
    values["metrics"] = {"enabled": False}
    stack = strix(values)
    args = server_args(stack, fed(stack), unlocked_source(stack), MODEL_VOLUME)  # type: ignore[arg-type]
    args["flags"] = {
        **args["flags"],
        "model_path": str(model),
        "host": "127.0.0.1",
        "port": free_port(),
        "ctx_size": 4096,
        "parallel": 2,
        "threads": min(os.cpu_count() or 1, 2),
    }
    return args


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    index = argv.index(flag)
    return [*argv[: index + 1], value, *argv[index + 2 :]]


def test_a_server_of_the_rendered_flags_reports_them(
    strix_halo_values: dict[str, Any], model: Path
) -> None:
    args = rendered_args(strix_halo_values, model)
    expected = expected_props(args)
    with run_llama_server(server_argv(args)) as url:
        ok, lines = verify.props_lines(url, expected)
        _, live = get_json(f"{url}/props")
    assert ok, lines
    assert lines == [props.summary(expected)]
    assert expected["checks"][0]["path"] == ["build_info"]
    # The recorded answer the unit tests read is still what this build says.
    recorded = json.loads(PROPS_FIXTURE.read_text())
    assert set(live) == set(recorded)
    assert set(live["default_generation_settings"]) == set(recorded["default_generation_settings"])


@pytest.mark.parametrize(
    ("flag", "value", "lines"),
    [
        (
            "-np",
            "4",
            [
                "/props total_slots: 4, rendered flags.parallel: 2",
                # 4096 cells shared by 4 slots instead of 2.
                "/props default_generation_settings.n_ctx: 1024, rendered flags.ctx_size / "
                "flags.parallel: 2048",
            ],
        ),
        (
            "-c",
            "8192",
            [
                "/props default_generation_settings.n_ctx: 4096, rendered flags.ctx_size / "
                "flags.parallel: 2048"
            ],
        ),
    ],
)
def test_a_server_started_otherwise_fails_naming_both_values(
    strix_halo_values: dict[str, Any], model: Path, flag: str, value: str, lines: list[str]
) -> None:
    args = rendered_args(strix_halo_values, model)
    with run_llama_server(with_value(server_argv(args), flag, value)) as url:
        ok, got = verify.props_lines(url, expected_props(args))
    assert not ok
    assert got == lines


def test_the_verify_jobs_own_files_check_props_behind_the_api_key(
    strix_halo_values: dict[str, Any], model: Path, tmp_path: Path
) -> None:
    """verify.py as the Job runs it: alone in a folder with the ConfigMap's files, a plain
    Python, the key from the environment; /props is not public (b11434 server-http.cpp)."""
    args = rendered_args(strix_halo_values, model)
    expected = expected_props(args)
    config_map = verify_config_map(
        Meta("check", "llm", {}), "{}", VERIFY_SOURCE.read_text(), HTTP_POLICY_SOURCE.read_text(),
        props_source=PROPS_SOURCE.read_text(), expected_props=expected,
    )  # fmt: skip
    job = verify_job(
        Meta("check", "llm", {"app.kubernetes.io/instance": "x"}), image="python:3.12",
        config_map="check", url="URL", api_key_secret=None, run_as_user=1000, check_props=True,
    )  # fmt: skip
    mount = tmp_path / "verify"
    mount.mkdir()
    for name, text in config_map["data"].items():
        (mount / name).write_text(text)
    (mount / "expect.json").unlink()  # recorded below, against this server
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    argv = [word.replace(VERIFY_MOUNT, str(mount)) for word in command[1:]]
    assert argv[2:] == ["--expect", f"{mount}/expect.json", "--props", f"{mount}/props.json"]
    key = "sk-props-contract"
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with run_llama_server([*server_argv(args), "--api-key", key]) as url:
        argv[1] = url
        record = [*STOCK_PYTHON, argv[0], url, "--expect", argv[3], "--record"]
        env = {**plain, verify.API_KEY_ENV: key}
        recorded = subprocess.run(record, env=env, capture_output=True, text=True, check=False)
        assert recorded.returncode == 0, recorded.stderr
        # The speed is not this test's subject: a tiny model's milliseconds on a busy CPU can
        # fall a hundredfold between the recording and the check.
        doc = json.loads((mount / "expect.json").read_text())
        doc["tolerance"]["min_decode_fraction"] = 0.0
        (mount / "expect.json").write_text(json.dumps(doc))
        checked = subprocess.run(
            [*STOCK_PYTHON, *argv], env=env, capture_output=True, text=True, check=False
        )
        keyless = subprocess.run(
            [*STOCK_PYTHON, *argv], env=plain, capture_output=True, text=True, check=False
        )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[0] == props.summary(expected)
    assert keyless.returncode == 1
    assert keyless.stdout.splitlines()[0].startswith("/props: request failed: ")
    assert "HTTP 401" in keyless.stdout.splitlines()[0]
