"""Run a real Prometheus (Debian's `prometheus` package) on loopback and query its HTTP API."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.llama_server import free_port, stop

INSTALL_HINT = "apt-get install -y prometheus (.ci/run installs it)"


def prometheus_tool(name: str) -> str:
    """`prometheus` or `promtool` from PATH, or a clear error naming the package."""
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None
    )
    if found is None:
        raise RuntimeError(f"{name} is not installed: {INSTALL_HINT}")
    return found


@dataclass
class LivePrometheus:
    """A running Prometheus: its base URL and where it logs."""

    url: str
    log: Path

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the decoded `data` (an error raises with Prometheus's message)."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: HTTP {exc.code}: {exc.read()!r}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector an expression evaluates to now."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll an expression until it returns data; the result (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no data for {expr} within {timeout:.0f}s")
            time.sleep(0.5)


@contextlib.contextmanager
def run_prometheus(
    config: dict[str, Any], rules: dict[str, Any] | None = None
) -> Iterator[LivePrometheus]:
    """Start Prometheus on a free loopback port with `config` (and a rules file), then stop it."""
    binary = prometheus_tool("prometheus")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        if rules is not None:
            (root / "rules.yml").write_text(yaml.safe_dump(rules))
            config = {**config, "rule_files": [str(root / "rules.yml")]}
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        log_path = root / "prometheus.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--web.console.templates=" + str(root),
                    "--web.console.libraries=" + str(root),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 60
                while True:
                    if process.poll() is not None:
                        raise RuntimeError(f"prometheus exited:\n{log_path.read_text()[-3000:]}")
                    try:
                        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                            if response.status == 200:
                                break
                    except (urllib.error.URLError, ConnectionError, TimeoutError):
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"prometheus not ready:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.2)
                yield LivePrometheus(url=url, log=log_path)
            finally:
                stop(process, grace=20)
