"""Validation of `docker-host` (MI300X) stacks: digests, Caddy, allowlists, patches, secrets."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest

from infra.config import missing_secrets, parse_stack
from infra.config.docker_host import DockerHostStack
from tests.conftest import problems_of, stack_values


@pytest.fixture
def values() -> dict[str, Any]:
    return copy.deepcopy(stack_values("mi300x"))


def test_seed_002_settings_are_the_stack(values: dict[str, Any]) -> None:
    stack = parse_stack(values)
    assert isinstance(stack, DockerHostStack)
    server = stack.server
    assert server.max_model_len == 262144 and server.max_num_batched_tokens == 2048
    assert server.kv_cache_memory_bytes == 20 * 10**9 and server.kv_offloading_size == 96
    assert server.speculative is not None and server.speculative.num_speculative_tokens == 7
    assert (server.reasoning_parser, server.tool_call_parser) == ("deepseek_v4", "deepseek_v4")
    assert stack.model.size_gib == 156.67


def test_vllm_image_without_digest_is_rejected_unless_allowed(values: dict[str, Any]) -> None:
    values["server"]["allowFloatingImage"] = False
    (problem,) = problems_of(values)
    assert problem.startswith("server.image: 'vllm/vllm-openai-rocm:v0.33.0' has no digest")
    values["server"]["image"] = "vllm/vllm-openai-rocm@sha256:" + "ab" * 32
    assert isinstance(parse_stack(values), DockerHostStack)


def test_an_allowlist_of_some_networks_needs_no_allow_world(values: dict[str, Any]) -> None:
    values["caddy"]["allowedCidrs"] = ["0.0.0.0/1", "192.168.0.0/16", "2001:db8::/32"]
    assert isinstance(parse_stack(values), DockerHostStack)


@pytest.mark.parametrize(
    "key",
    [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4 $(touch /tmp/x)",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4\nhandle",
        "host.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4",
        "SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8",
    ],
)
def test_a_host_key_is_one_key_and_nothing_after_it(values: dict[str, Any], key: str) -> None:
    values["host"]["hostKey"] = key
    (problem,) = problems_of(values)
    assert problem.startswith("host.hostKey: ")


def test_a_host_key_line_as_ssh_keyscan_prints_it_is_accepted(values: dict[str, Any]) -> None:
    key = values["host"]["hostKey"]
    values["host"]["hostKey"] = f"mi300x.example.com {key} root@mi300x"
    stack = parse_stack(values)
    assert isinstance(stack, DockerHostStack) and stack.host.host_key == key


@pytest.mark.parametrize("directory", ["/etc", "/etc/llm", "/usr/local/models", "/var/lib/x"])
def test_system_directories_are_refused(values: dict[str, Any], directory: str) -> None:
    values["host"]["modelDir"] = directory
    (problem,) = problems_of(values)
    assert problem.startswith(f"host.modelDir: {directory!r} is in the system directory")


@pytest.mark.parametrize("cidr", ["10.0.0.1/8", "300.1.1.0/24", "example.com"])
def test_malformed_cidr_is_rejected(values: dict[str, Any], cidr: str) -> None:
    values["caddy"]["allowedCidrs"] = [cidr]
    (problem,) = problems_of(values)
    assert problem.startswith(f"caddy.allowedCidrs[0]: {cidr!r} is not a network")


def test_automatic_https_needs_a_domain_and_an_email(values: dict[str, Any]) -> None:
    values["caddy"].update(site="203.0.113.10", acmeEmail=None)
    problems = problems_of(values)
    assert problems[0].startswith("caddy.tls: auto needs a domain")
    assert problems[1].startswith("caddy.acmeEmail: a valid email is required")
    values["caddy"]["tls"] = "internal"
    assert isinstance(parse_stack(values), DockerHostStack)


def test_malformed_domain_is_rejected(values: dict[str, Any]) -> None:
    values["caddy"]["site"] = "llm_example..com"
    (problem,) = problems_of(values)
    assert problem.startswith("caddy.site: 'llm_example..com' is not a lowercase DNS name")


def test_patch_with_wrong_sha256_stops_before_anything_exists(
    values: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Pulumi.yaml").write_text("name: llm-infra\n")
    (tmp_path / "fp8.py").write_text("patched = True\n")
    good = hashlib.sha256(b"patched = True\n").hexdigest()
    target = "/usr/local/lib/python3.12/dist-packages/vllm/fp8.py"
    values["patches"] = [{"source": "fp8.py", "target": target, "sha256": "0" * 64}]
    (problem,) = problems_of(values)
    assert problem.startswith(f"patches[0].sha256: fp8.py has sha256 {good}, not the pinned")
    values["patches"][0]["sha256"] = good
    assert isinstance(parse_stack(values), DockerHostStack)
    values["patches"][0]["source"] = "missing.py"
    assert problems_of(values) == ["patches[0].source: 'missing.py' does not exist"]


@pytest.mark.parametrize(
    ("model_dir", "key"),
    [("/opt/llm", "host.modelDir: '/opt/llm' is host.baseDir"), ("/opt", "host.baseDir: ")],
)
def test_model_dir_is_neither_the_base_dir_nor_above_it(
    values: dict[str, Any], model_dir: str, key: str
) -> None:
    values["host"]["modelDir"] = model_dir
    (problem,) = problems_of(values)
    assert problem.startswith(key)


@pytest.mark.parametrize(
    "model_dir", ["/opt/llm/.", "/opt//llm", "/opt/llm/", "/srv/models/my dir", "/srv/$(id)", "/"]
)
def test_model_dir_must_be_a_plain_normal_absolute_path(
    values: dict[str, Any], model_dir: str
) -> None:
    values["host"]["modelDir"] = model_dir
    (problem,) = problems_of(values)
    assert problem.startswith(f"host.modelDir: {model_dir!r} must be")


def test_docker_host_needs_ssh_key_and_api_key(values: dict[str, Any]) -> None:
    stack = parse_stack(values)
    always, for_up = missing_secrets(stack, set())
    assert always == []
    assert [p.split(":")[0] for p in for_up] == ["sshPrivateKey", "apiKey"]
    assert missing_secrets(stack, {"sshPrivateKey", "apiKey"}) == ([], [])
