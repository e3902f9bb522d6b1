"""The MI300X host's bundle: a pure function of the validated inputs and the stack name."""

from __future__ import annotations

import copy
from typing import Any, cast

from components.validation import with_defaults
from components.vllm.bundle import HostCommand, HostFile, host_bundle
from components.vllm.host_scripts import remote_command
from components.vllm.inputs import VllmRocmServerArgs
from tests.support.component_inputs import vllm_server

SECRET = "sk-bundle-secret-9f3a"


def server_args(**changes: Any) -> VllmRocmServerArgs:
    args = {**vllm_server(), "api_key": SECRET, **changes}
    return cast(VllmRocmServerArgs, with_defaults(args, VllmRocmServerArgs))


def texts(args: VllmRocmServerArgs) -> dict[str, str]:
    """Every file's text and every command's scripts, by resource suffix."""
    bundle = host_bundle(args, "mi300x")
    found = {suffix: f.text or "" for suffix, f in bundle.files.items()}
    for suffix, c in bundle.commands.items():
        found[suffix] = c.script + (c.delete_script or "")
    return found


def test_same_inputs_give_the_same_bundle_and_the_inputs_stay_as_they_were() -> None:
    args = server_args()
    before = copy.deepcopy(args)
    first = host_bundle(args, "mi300x")
    assert host_bundle(copy.deepcopy(args), "mi300x") == first
    assert args == before


def test_the_bundle_holds_every_file_and_command_of_the_host() -> None:
    bundle = host_bundle(server_args(), "mi300x")
    assert set(bundle.files) == {
        "compose",
        "caddyfile",
        "lock",
        "fetcher",
        "http-policy",
        "dashboard",
        "alerts",
        "scrape",
        "verify-script",
        "verify-http-policy",
        "verify-props-check",
        "verify-expectations",
        "verify-props",
    }
    assert list(bundle.commands) == [
        "preflight",
        "verify-patches",
        "fetch",
        "env-file",
        "up",
        "check",
        "verify",
    ]
    assert bundle.files["compose"].remote_path == "/opt/llm/compose.yaml"
    env_file = bundle.commands["env-file"].stdin
    assert env_file is not None
    assert (env_file.remote_path, env_file.mode) == ("/opt/llm/vllm.env", 0o600)


def test_each_step_comes_after_the_steps_it_needs() -> None:
    """The component maps the bundle to resources in one pass: each `after` is made first."""
    bundle = host_bundle(server_args(), "mi300x")
    seen: set[str] = set()
    for step in bundle.steps:
        assert set(step.after) <= seen, step.resource
        seen.add(step.resource)
    assert set(bundle.commands["up"].after) >= {"fetch", "env-file", "compose", "caddyfile"}


def test_the_secret_is_only_referenced_never_in_the_bundle() -> None:
    bundle = host_bundle(server_args(), "mi300x")
    assert SECRET not in repr(bundle)
    env_file = bundle.commands["env-file"].stdin
    assert env_file is not None and env_file.secret_input == "api_key"
    assert f"VLLM_API_KEY='{SECRET}'" in env_file.content(SECRET)


def test_a_changed_input_changes_the_files_and_scripts_made_from_it_only() -> None:
    base = texts(server_args())
    caddy = {**vllm_server()["caddy"], "site": "other.example.com"}
    changed = texts(server_args(caddy=caddy))
    differ = {suffix for suffix in base if base[suffix] != changed[suffix]}
    # The site reaches the Caddyfile, the scrape config and the check; the check's digest of up
    # stays (up does not name the site), and the lock and fetcher are untouched.
    assert {"caddyfile", "scrape", "check", "compose"} <= differ
    assert not differ & {"lock", "fetcher", "preflight", "fetch"}


def test_a_patch_is_a_local_file_copied_as_it_is_and_verified(tmp_path: Any) -> None:
    source = tmp_path / "fix.py"
    source.write_text("patched\n")
    patch = {"source": str(source), "target": "/usr/lib/vllm/fix.py", "sha256": "a" * 64}
    bundle = host_bundle(server_args(patches=[patch]), "mi300x")
    copied = bundle.files["patch-0"]
    assert copied == HostFile(
        "patch-0", "/opt/llm/patches/aaaaaaaaaaaa-fix.py", None, source=str(source)
    )
    verify = bundle.commands["verify-patches"]
    assert isinstance(verify, HostCommand) and verify.after == ("patch-0",)
    assert "/opt/llm/patches/aaaaaaaaaaaa-fix.py" in verify.script
    assert bundle.commands["up"].command == remote_command(bundle.commands["up"].script)
