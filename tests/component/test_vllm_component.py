"""VllmRocmServer under Pulumi mocks: its remote commands, copies, ordering and secrets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from pulumi_command import local

from components.vllm.builders import generated_header
from components.vllm.component import VllmRocmServer
from components.vllm.inputs import VllmRocmServerArgs
from infra.render import Rendered, run_program
from tests.support.vllm_samples import (
    API_KEY,
    HOST_KEY,
    LOCK,
    MODEL_DIR,
    SSH_KEY,
    VLLM_IMAGE,
    sample_flags,
    server_args,
)


def render(args: VllmRocmServerArgs, consumer: bool = False) -> Rendered:
    """Build the component in a fresh mock engine (and a resource that uses its URL)."""

    def program() -> None:
        server = VllmRocmServer("mi300x", args)
        pulumi.export("url", server.url)
        pulumi.export("served_model_name", server.served_model_name)
        if consumer:
            local.Command("consumer", create=server.url.apply(lambda url: f"curl {url}/health"))

    return run_program(program, {}, [], stack="test")


def by_name(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rendered.resources}


@pytest.fixture
def patch_file(tmp_path: Path) -> Path:
    path = tmp_path / "fp8.py"
    path.write_text("# patched fp8 path for MI300X\n")
    return path


def test_registers_remote_commands_and_copies_under_the_component(patch_file: Path) -> None:
    resources = by_name(render(server_args(patch_file)))
    assert resources["mi300x"]["type"] == "llm-infra:index:VllmRocmServer"
    expected = {
        "mi300x-preflight": "command:remote:Command",
        "mi300x-compose": "command:remote:CopyToRemote",
        "mi300x-caddyfile": "command:remote:CopyToRemote",
        "mi300x-lock": "command:remote:CopyToRemote",
        "mi300x-fetcher": "command:remote:CopyToRemote",
        "mi300x-http-policy": "command:remote:CopyToRemote",
        "mi300x-patch-0": "command:remote:CopyToRemote",
        "mi300x-verify-patches": "command:remote:Command",
        "mi300x-fetch": "command:remote:Command",
        "mi300x-env-file": "command:remote:Command",
        "mi300x-up": "command:remote:Command",
        "mi300x-check": "command:remote:Command",
    }
    assert {n: r["type"] for n, r in resources.items() if n != "mi300x"} == expected
    assert all(resources[n]["parent"] == "mi300x" for n in expected)


def test_generated_files_are_string_assets_at_their_remote_paths(patch_file: Path) -> None:
    rendered = render(server_args(patch_file))
    resources = by_name(rendered)
    compose = resources["mi300x-compose"]["inputs"]
    assert compose["remotePath"] == "/opt/llm/compose.yaml"
    content = rendered.files["/opt/llm/compose.yaml"]
    assert compose["source"] == {
        "stringAsset": {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    }
    document = yaml.safe_load(content)
    assert document["services"]["vllm"]["image"] == VLLM_IMAGE
    assert resources["mi300x-caddyfile"]["inputs"]["remotePath"] == "/opt/llm/Caddyfile"
    assert b"reverse_proxy vllm:8000" in rendered.files["/opt/llm/Caddyfile"]
    assert resources["mi300x-lock"]["inputs"]["remotePath"] == "/opt/llm/model.lock.json"
    assert json.loads(rendered.files["/opt/llm/model.lock.json"]) == {"version": 1, **LOCK}
    patch = resources["mi300x-patch-0"]["inputs"]
    assert "fileAsset" in patch["source"]
    assert str(patch_file) not in json.dumps(rendered.resources)
    assert rendered.files[patch["remotePath"]] == patch_file.read_bytes()
    assert patch["remotePath"].startswith("/opt/llm/patches/")


def test_up_runs_after_everything_it_needs_and_downs_on_delete(patch_file: Path) -> None:
    resources = by_name(render(server_args(patch_file)))
    up = resources["mi300x-up"]
    assert set(up["options"]["dependsOn"]) >= {
        "mi300x-fetch",
        "mi300x-verify-patches",
        "mi300x-env-file",
        "mi300x-compose",
        "mi300x-caddyfile",
    }
    assert up["options"]["deleteBeforeReplace"] is True
    assert "up -d --wait" in up["inputs"]["create"]
    assert up["inputs"]["update"] == up["inputs"]["create"]
    assert " down " in up["inputs"]["delete"].replace("\\\n", " ")
    assert MODEL_DIR not in up["inputs"]["delete"].replace(f"# Leaves {MODEL_DIR}", "")
    assert "triggers" not in up["inputs"]
    assert resources["mi300x-check"]["options"]["dependsOn"] == ["mi300x-up"]
    assert resources["mi300x-verify-patches"]["options"]["dependsOn"] == ["mi300x-patch-0"]
    fetch = resources["mi300x-fetch"]
    assert fetch["options"]["customTimeouts"]["create"] == "12h"


def test_a_flag_change_updates_up_in_place_and_leaves_the_fetch_alone() -> None:
    before = by_name(render(server_args()))
    flags = sample_flags()
    flags["max_num_batched_tokens"] = 4096
    after = by_name(render(server_args(flags=flags)))
    assert before["mi300x-up"]["inputs"]["create"] != after["mi300x-up"]["inputs"]["create"]
    assert before["mi300x-check"]["inputs"]["create"] != after["mi300x-check"]["inputs"]["create"]
    assert before["mi300x-fetch"]["inputs"] == after["mi300x-fetch"]["inputs"]
    assert before["mi300x-preflight"]["inputs"] == after["mi300x-preflight"]["inputs"]
    assert (
        before["mi300x-caddyfile"]["inputs"]["source"]
        == after["mi300x-caddyfile"]["inputs"]["source"]
    )


def test_a_new_lock_refetches() -> None:
    before = by_name(render(server_args()))
    lock = json.loads(json.dumps(LOCK))
    lock["revision"] = "f" * 40
    after = by_name(render(server_args(model_lock=lock)))
    assert before["mi300x-fetch"]["inputs"]["create"] != after["mi300x-fetch"]["inputs"]["create"]


def test_api_key_and_ssh_key_never_appear_in_rendered_inputs(patch_file: Path) -> None:
    rendered = render(server_args(patch_file))
    resources = by_name(rendered)
    text = json.dumps(rendered.resources) + json.dumps(rendered.outputs)
    text += "".join(content.decode() for content in rendered.files.values())
    text += "".join(rendered.commands.values())
    for secret in (API_KEY, SSH_KEY, "b3BlbnNzaC1rZXktdjEAAAA-secret"):
        assert secret not in text
    assert resources["mi300x-env-file"]["inputs"]["stdin"] == "[secret]"
    for name, resource in resources.items():
        if name != "mi300x":
            assert resource["inputs"]["connection"] == "[secret]", name


def test_outputs_are_the_https_url_and_served_name() -> None:
    outputs = render(server_args()).outputs
    assert outputs == {
        "url": "https://llm.example.com",
        "served_model_name": "deepseek-v4-flash-0731",
    }


def test_recorded_expectations_add_a_verify_command_after_the_check() -> None:
    expectations = json.dumps({"version": 1, "cases": []})
    rendered = render(server_args(verify_expectations=expectations))
    resources = by_name(rendered)
    verify = resources["mi300x-verify"]
    assert "mi300x-check" in verify["options"]["dependsOn"]
    assert "verify.py http://vllm:8000" in verify["inputs"]["create"]
    assert rendered.files["/opt/llm/verify/expect.json"].decode() == expectations
    assert b"def main(" in rendered.files["/opt/llm/verify/verify.py"]
    assert b"def props_problems(" in rendered.files["/opt/llm/verify/props.py"]
    # What /v1/models must report, from the flags the vllm serve argv is made of.
    assert "--props /opt/llm-infra-verify/props.json" in verify["inputs"]["create"]
    props = json.loads(rendered.files["/opt/llm/verify/props.json"])
    assert props["endpoint"] == "/v1/models"
    assert [(c["path"], c["expected"], c["rendered"]) for c in props["checks"]] == [
        (["data", 0, "id"], "deepseek-v4-flash-0731", "flags.served_model_name"),
        (["data", 0, "root"], sample_flags()["model"], "flags.model"),
        (["data", 0, "max_model_len"], sample_flags()["max_model_len"], "flags.max_model_len"),
    ]
    assert "mi300x-verify" not in by_name(render(server_args()))


def test_outputs_wait_for_the_final_check() -> None:
    resources = by_name(render(server_args(), consumer=True))
    assert resources["consumer"]["options"]["dependsOn"] == ["mi300x-check"]
    assert resources["consumer"]["inputs"]["create"] == "curl https://llm.example.com/health"


def test_the_connection_may_come_from_another_resource() -> None:
    def program() -> None:
        host = k8s.core.v1.ConfigMap("gpu-host", metadata={"name": "203.0.113.10"})
        connection = {
            "host": host.metadata.name,
            "user": "deploy",
            "private_key": SSH_KEY,
            "host_key": HOST_KEY,
        }
        VllmRocmServer("mi300x", server_args(connection=connection))

    resources = by_name(run_program(program, {}, [], stack="test"))
    assert "gpu-host" in resources["mi300x-preflight"]["options"]["dependsOn"]
    assert resources["mi300x-preflight"]["inputs"]["connection"] == "[secret]"


def test_integers_given_as_floats_reach_the_host_as_integers() -> None:
    flags: dict[str, Any] = {**sample_flags(), "port": 8000.0, "tensor_parallel_size": 1.0}
    lock = json.loads(json.dumps(LOCK))
    lock["files"][0]["size"] = 1234.0
    rendered = render(server_args(flags=flags, model_lock=lock))
    compose = yaml.safe_load(rendered.files["/opt/llm/compose.yaml"])
    command = compose["services"]["vllm"]["command"]
    assert command[command.index("--port") + 1] == "8000"
    assert command[command.index("-tp") + 1] == "1"
    lock_text = rendered.files["/opt/llm/model.lock.json"]
    assert b'"size": 1234\n' in lock_text and b"1234.0" not in lock_text


def test_every_placed_file_with_comments_starts_with_the_same_generated_header(
    patch_file: Path,
) -> None:
    args = server_args(
        patch_file,
        verify_expectations=json.dumps({"version": 1, "cases": []}),
        metrics={
            "port": 9443,
            "allowed_cidrs": ["10.0.0.0/8"],
            "gpu_exporter_image": "rocm/device-metrics-exporter:v1.2.1",
        },
    )
    first, second = render(args), render(args)
    assert first.files == second.files
    header = generated_header("test").encode()
    patch = next(path for path in first.files if path.startswith("/opt/llm/patches/"))
    commented = [p for p in first.files if p != patch and not p.endswith(".json")]
    # compose, Caddyfile, the fetcher and its policy, verify.py, its policy and its props
    # check, rules, scrape.
    assert len(commented) == 9, sorted(first.files)
    for path in commented:
        assert first.files[path].startswith(header), path
    for path in [*(p for p in first.files if p.endswith(".json")), patch]:
        assert b"Generated by llm-infra" not in first.files[path], path
    # A patch overlay is the user's file, byte for byte: the host checks its pinned sha256.
    assert first.files[patch] == patch_file.read_bytes()
