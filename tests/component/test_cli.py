"""The `llm-infra` command line as a user types it: help, usage, bad input, exit codes."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.payloads.verify import new_expectations
from tests.conftest import ROOT, STACKS
from tests.support.cli import llm_infra, run_cli


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("render", ["--out"]),
        ("lock", ["--endpoint"]),
        ("plan", ["--json", "--suggest", "--headroom", "--gguf"]),
        (
            "verify",
            ["--url", "--server", "--expect", "--record", "--api-key", "--api-key-env-file",
             "--min-decode-tps", "--model", "--api"],
        ),
        (
            "bench",
            ["--url", "--server", "--api-key", "--model", "--output-file", "--decode-requests",
             "--decode-tokens", "--prefill-requests", "--prefill-words", "--concurrency",
             "--concurrent-tokens", "--requests-per-stream", "--seed", "--no-ignore-eos"],
        ),
        ("gpu-gate", ["--log", "--expect-layers", "--device-prefix", "--min-gpu-mib",
                      "--wait-url"]),
        ("diff", ["--against"]),
        ("check-litellm", ["--stack"]),
        ("docs", ["--output-file", "--check"]),
        ("fetch", ["--lock", "--dest", "--parallel", "--retire", "--retries"]),
        ("check-model", ["--lock", "--dest"]),
        ("init", ["--repo", "--file", "--target", "--revision", "--endpoint", "--alias",
                  "--gpu-memory-gib", "--box", "--node-ram-gib", "--carve-out-gib",
                  "--node-cpu", "--threads", "--context-size", "--parallel", "--force"]),
        ("hub", ["serve", "sample", "stub"]),
    ],
)  # fmt: skip
def test_each_command_help_shows_all_its_options_under_its_own_name(
    command: str, options: list[str]
) -> None:
    result = llm_infra(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: llm-infra {command} "), result.stdout
    for option in options:
        assert f" {option}" in result.stdout, (option, result.stdout)


def test_init_offers_as_target_the_table_of_targets_that_draft_a_stack() -> None:
    from infra.targets.registry import init_kinds

    listed = ",".join(init_kinds())
    assert f"--target {{{listed}}}" in llm_infra("init", "--help").stdout
    refused = run_cli(["init", "x", "--repo", "a/b", "--file", "f", "--target", "fleet"])
    assert refused.returncode == 2
    assert (
        "argument --target: invalid choice: 'fleet' (choose from "
        + ", ".join(repr(kind) for kind in init_kinds())
        + ")"
    ) in refused.stderr


def test_a_mistyped_option_prints_that_commands_usage() -> None:
    result = llm_infra("plan", "strix-halo", "--jsn")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: llm-infra plan ")
    assert "llm-infra plan: error: unrecognized arguments: --jsn" in result.stderr


def test_verify_checks_against_the_expectations_given_with_expect(tmp_path: Path) -> None:
    # The stack has no recorded expectations; --expect names a file, so the check goes ahead
    # and reaches the (closed) endpoint instead of stopping at the missing default file.
    assert not (STACKS / "strix-halo.verify.json").exists()
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(new_expectations()))
    url = f"http://127.0.0.1:{closed_port()}"
    result = llm_infra("verify", "strix-halo", "--url", url, "--expect", str(expect))
    assert result.returncode == 1, result.stderr
    assert "llm-infra verify:" in result.stderr and "no expectations" not in result.stderr
    without = llm_infra("verify", "strix-halo", "--url", url)
    assert without.returncode == 2
    assert "no expectations" in without.stderr


def test_verify_asks_each_stack_for_what_its_server_must_report(tmp_path: Path) -> None:
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(new_expectations()))
    url = f"http://127.0.0.1:{closed_port()}"
    llama = llm_infra("verify", "strix-halo", "--url", url, "--expect", str(expect))
    vllm = llm_infra("verify", "mi300x", "--url", url, "--expect", str(expect))
    assert llama.stdout.startswith(f"/props: request failed: {url}/props: cannot connect")
    assert vllm.stdout.startswith(f"/v1/models: request failed: {url}/v1/models: cannot connect")
    # A model named by a pattern and never locked: no -m to expect; the answers still count.
    document = yaml.safe_load((STACKS / "Pulumi.strix-halo.yaml").read_text())
    document["config"]["llm-infra:model"]["files"] = ["UD-IQ1_M/*"]
    stack = tmp_path / "Pulumi.strix-halo.yaml"
    stack.write_text(yaml.safe_dump(document))
    unlocked = llm_infra("verify", str(stack), "--url", url, "--expect", str(expect))
    assert unlocked.returncode == 1
    assert unlocked.stdout.splitlines() == [
        "server properties: not checked (model.files: patterns ['UD-IQ1_M/*'] name no file "
        "until the model is locked (run: llm-infra lock STACK))"
    ]
    assert f"{url}/v1/models: cannot connect" in unlocked.stderr


@pytest.mark.parametrize("command", ["render", "plan", "docs"])
def test_a_stack_without_lock_or_size_is_one_line_naming_the_key(
    command: str, tmp_path: Path
) -> None:
    document = yaml.safe_load((STACKS / "Pulumi.strix-halo.yaml").read_text())
    del document["config"]["llm-infra:model"]["sizeGib"]
    path = tmp_path / "Pulumi.strix-halo.yaml"
    path.write_text(yaml.safe_dump(document))
    out = {
        "render": ["--out", str(tmp_path / "out")],
        "docs": ["--output-file", str(tmp_path / "d")],
    }
    args = [command, str(path), *out.get(command, [])]
    result = llm_infra(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "model.sizeGib: required until the model is locked" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_stack_names_the_file_it_looked_for() -> None:
    result = llm_infra("render", "no-such-stack")
    assert result.returncode == 2
    assert "no stack file" in result.stderr and "Pulumi.no-such-stack.yaml" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_mistyped_stack_name_gets_the_closest_and_the_list_of_stacks() -> None:
    result = llm_infra("render", "strixhalo")
    assert result.returncode == 2
    names = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS.glob("Pulumi.*.yaml"))
    assert f"; did you mean strix-halo?; the stacks in {ROOT}: {', '.join(names)}" in result.stderr


def test_outside_a_checkout_a_stack_name_says_how_to_point_at_one(tmp_path: Path) -> None:
    outside = llm_infra("plan", "strix-halo", cwd=tmp_path)
    assert outside.returncode == 2
    assert "you are outside an llm-infra checkout: cd into one, set LLM_INFRA_PROJECT=DIR" in (
        outside.stderr
    )
    pointed = run_cli(
        ["plan", "strix-halo", "-o", "json"],
        cwd=tmp_path,
        env={**os.environ, "LLM_INFRA_PROJECT": str(ROOT)},
    )
    assert pointed.returncode == 0, pointed.stderr
    assert json.loads(pointed.stdout)["fits"] is True


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: c["llm-infra:server"].update(contextSiz=1),
            "server.contextSiz: unknown key (did you mean contextSize?)",
        ),
        (
            lambda c: c["llm-infra:store"].update(sizs="1Ti"),
            "store.sizs: unknown key (did you mean size?)",
        ),
        (
            lambda c: c["llm-infra:server"]["resources"]["limits"].update(memory="20GB"),
            "server.resources.limits.memory: '20GB' is not a Kubernetes quantity: write 20Gi",
        ),
        (
            lambda c: c["llm-infra:server"]["resources"]["limits"].update(memory="512 MiB"),
            "server.resources.limits.memory: '512 MiB' is not a Kubernetes quantity: write 512Mi",
        ),
    ],
)
def test_a_key_or_quantity_error_says_what_to_write(
    edit: Callable[[dict[str, Any]], None], message: str, tmp_path: Path
) -> None:
    document = yaml.safe_load((STACKS / "Pulumi.strix-halo.yaml").read_text())
    edit(document["config"])
    path = tmp_path / "Pulumi.strix-halo.yaml"
    path.write_text(yaml.safe_dump(document))
    result = llm_infra("plan", str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr.splitlines()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("config:\n  - target\n", "no `config:` mapping"),
        ("config:\n  llm-infra:target: [kubernetes]\n", "target: ['kubernetes'] is not a known"),
        ("config:\n\tllm-infra:target: kubernetes\n", "Pulumi.bad.yaml:2:1: YAML syntax: "),
        ("config:\n  a: [1, 2\n", "Pulumi.bad.yaml:3:1: YAML syntax: while parsing a flow"),
        (
            "config: !!python/object/apply:os.system ['touch PWNED']\n",
            "Pulumi.bad.yaml:1:9: YAML syntax: could not determine a constructor",
        ),
        (b"config:\n  llm-infra:target: \xff\xfe\n", "not a readable YAML file"),
        ("- just\n- a list\n", "no `config:` mapping"),
    ],
)
def test_a_malformed_stack_file_is_one_line_not_a_traceback(
    text: str | bytes, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    result = llm_infra("render", str(path), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "PWNED").exists()


def test_a_plaintext_secret_in_a_stack_file_is_refused_without_repeating_it(
    tmp_path: Path,
) -> None:
    document = yaml.safe_load((STACKS / "Pulumi.mi300x.yaml").read_text())
    document["config"]["llm-infra:apiKey"] = "sk-live-plaintext-0123456789"
    path = tmp_path / "Pulumi.mi300x.yaml"
    path.write_text(yaml.safe_dump(document))
    for command in ("render", "plan", "docs"):
        result = llm_infra(command, str(path))
        assert result.returncode == 2, (command, result.stderr)
        assert "apiKey: a secret in plain text" in result.stderr
        assert "pulumi config set --secret apiKey" in result.stderr
        assert "sk-live-plaintext" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_a_fleet_endpoint_command_names_its_servers_when_none_is_chosen(command: str) -> None:
    unnamed = llm_infra(command, "strix-halo-pair")
    assert unnamed.returncode == 2
    assert "--server: the stack has several servers; name one of" in unnamed.stderr
    assert "'deepseek-v4-flash-0731-b'" in unnamed.stderr
    unknown = llm_infra(command, "strix-halo-pair", "--server", "nope")
    assert unknown.returncode == 2 and "no server 'nope'" in unknown.stderr
    # With --url too: the name is still checked, never ignored.
    named = llm_infra(command, "strix-halo-pair", "--server", "nope", "--url", "http://127.0.0.1:9")
    assert named.returncode == 2 and "no server 'nope'" in named.stderr
    single = llm_infra(command, "strix-halo", "--server", "deepseek-v4-flash-0731")
    assert single.returncode == 2 and "the stack has one server" in single.stderr
