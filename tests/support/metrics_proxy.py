"""Run the metrics proxy exactly as a rendered Deployment runs it, on this machine.

The container's command and environment come from the render; only what points at the pod
changes: the ConfigMap's script is written to a folder standing in for its mount, the ports
are free ones on loopback, and a `secretKeyRef` is resolved from the given Secret values.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.llama_server import free_port, stop


def proxy_container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The rendered metrics-proxy container of a server Deployment."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "metrics-proxy")


def _mounted_config_map(
    deployment: Mapping[str, Any], config_maps: Sequence[Mapping[str, Any]]
) -> tuple[str, Mapping[str, str]]:
    container = proxy_container(deployment)
    (mount,) = container["volumeMounts"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    config_map = next(
        c for c in config_maps if c["metadata"]["name"] == volume["configMap"]["name"]
    )
    return mount["mountPath"], config_map["data"]


def _resolved_env(
    container: Mapping[str, Any], secrets: Mapping[tuple[str, str], str]
) -> dict[str, str]:
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[(ref["name"], ref["key"])]
    return env


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the metrics proxy exited with code {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"the metrics proxy did not listen on {port} within {timeout}s")


@contextlib.contextmanager
def run_rendered_proxy(
    deployment: Mapping[str, Any],
    config_maps: Sequence[Mapping[str, Any]],
    folder: Path,
    *,
    upstream_port: int,
    secrets: Mapping[tuple[str, str], str] | None = None,
) -> Iterator[int]:
    """Start the rendered proxy in front of `upstream_port`; yield the port it listens on."""
    container = proxy_container(deployment)
    mount, files = _mounted_config_map(deployment, config_maps)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    command = list(container["command"])
    assert command[0] == "python3", command
    port = free_port()
    argv = [sys.executable]
    for word in command[1:]:
        argv.append(str(folder) + word[len(mount) :] if word.startswith(mount + "/") else word)
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--upstream-port") + 1] = str(upstream_port)
    env = {"PATH": os.environ.get("PATH", ""), **_resolved_env(container, secrets or {})}
    log = (folder / "proxy.log").open("wb")
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, process, timeout=20.0)
        yield port
    finally:
        stop(process)
        log.close()
