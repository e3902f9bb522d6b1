"""Strings the grammars admit really render and run: the scripts in a sandbox whose docker, ssh,
curl and wget are stubs, the Caddyfile in the real caddy (its matchers, and live in front of a stub
upstream that checks the API key); the stacks as written too."""

from __future__ import annotations

import ipaddress
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from components.validation import input_problems
from components.vllm.builders import generated_header
from components.vllm.caddyfile import caddyfile
from components.vllm.host_monitoring import metrics_site
from components.vllm.inputs import CaddySite
from infra.render import run_program
from tests.conftest import stack_values
from tests.support.caddy import caddy_binary, caddy_env, connection, free_port
from tests.support.component_inputs import (
    COMPONENTS,
    FREE_TEXT,
    with_string,
)
from tests.support.hostile_input import (
    MARK,
    SECTIONS,
    Path_,
    make_sandbox,
    rendered_and_run,
    run_scripts,
)


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A directory with stub docker, ssh, curl and wget that log their calls and succeed."""
    return make_sandbox(tmp_path)


@pytest.mark.parametrize("stack", list(SECTIONS))
def test_the_stacks_as_written_render_scripts_that_run_under_the_stubs(
    stack: str, sandbox: Path
) -> None:
    values = stack_values(stack)
    if stack == "mi300x":
        values["host"].update(baseDir=str(sandbox / "base"), modelDir=str(sandbox / "models"))
    rendered_and_run(stack, values, "(none)", sandbox)
    assert not (sandbox / MARK).exists()


TRICKY_KEY = f"sk-\"q\"'$(touch {MARK})'`touch {MARK}`;ü"
"""An API key of quotes, command substitutions and unicode: free text, passed as data."""


ENV_FILE_KEY = f'sk-"q"$(touch {MARK})`touch {MARK}`;$HOME ü'
"""The same for vLLM's env file, which takes anything but single quotes and line breaks."""


ADMITTED: list[tuple[str, Path_, str, str]] = [
    ("VllmRocmServer", ("model_dir",), "str", "{sandbox}/models/ds+v4@8_x.y-z"),
    ("VllmRocmServer", ("model_dir",), "str", "{sandbox}/models/" + "m" * 200),
    ("VllmRocmServer", ("base_dir",), "str", "{sandbox}/base/a@b+c"),
    ("VllmRocmServer", ("caddy", "site"), "str", "xn--e1afmkfd.example"),
    ("VllmRocmServer", ("caddy", "site"), "str", "a" * 63 + ".example.com"),
    ("VllmRocmServer", ("caddy", "allowed_cidrs"), "item", "127.0.0.0/8"),
    ("VllmRocmServer", ("caddy", "allowed_cidrs"), "item", "fd00::/8"),
    ("VllmRocmServer", ("caddy", "acme_email"), "str", "ops+llm%x_y@example.com"),
    ("VllmRocmServer", ("flags", "served_model_name"), "str", "org/model:v1+x.y_z"),
    ("VllmRocmServer", ("api_key",), "str", ENV_FILE_KEY),
    ("VllmRocmServer", ("verify_expectations",), "str", f'{{"x": "$(touch {MARK})"}}'),
    ("VllmRocmServer", ("project_name",), "str", "a" + "-b" * 31),
    ("VllmRocmServer", ("connection", "user"), "str", "_deploy-1"),
    ("GgufModelStore", ("retired_patterns",), "item", "[Qq]wen3-*-0000?-of-*.gguf"),
    ("GgufModelStore", ("revision",), "str", "refs/pr/12"),
    ("GgufModelStore", ("hf_endpoint",), "str", "http://[::1]:8080/mirror/hf"),
    ("GgufModelStore", ("hf_token",), "str", f"hf_'$(touch {MARK})'\"x\""),
    ("GgufModelStore", ("node_selector",), "value", "a.b_c-d"),
    ("LlamaCppVulkanServer", ("flags", "alias"), "str", "org/model:v1+x.y_z"),
    ("LlamaCppVulkanServer", ("metrics", "fetch_job_pattern"), "str", "(m|n)-fetch-.{8}$"),
    ("LlamaCppVulkanServer", ("verify_expectations",), "str", f"'$(touch {MARK})'\n\"x\""),
    ("LlamaCppVulkanServer", ("api_key",), "str", TRICKY_KEY),
    ("LlamaCppRpcWorker", ("head_pod_labels",), "key", "example.com/a_b.c-d"),
]
"""Per field, strings the grammars admit that a careless renderer would break on."""


RAN: set[str] = set()
"""The admitted cases that rendered and ran (the last test checks that all did)."""


def admitted_id(case: tuple[str, Path_, str, str]) -> str:
    component, path, kind, value = case
    return f"{component}-{'.'.join(map(str, path))}-{kind}-{value[:24]}"


class KeyCheckingUpstream(BaseHTTPRequestHandler):
    """vLLM's stand-in behind the real caddy: 200 only with `Authorization: Bearer <key>`."""

    key: ClassVar[str] = ""

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: failures show in the assertions."""

    def do_GET(self) -> None:
        authorised = self.headers.get("Authorization") == f"Bearer {type(self).key}"
        status = 200 if authorised or self.path == "/health" else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def live_caddy_status(site: CaddySite, key: str, sent_key: str, root: Path) -> int:
    """The status a loopback client gets from the real caddy serving `site` (internal TLS)."""
    KeyCheckingUpstream.key = key
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), KeyCheckingUpstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    https_port, http_port = free_port(), free_port()
    live: CaddySite = {**site, "tls": "internal", "acme_email": None}
    config = root / "Caddyfile.live"
    config.write_text(
        caddyfile(
            live,
            upstream=f"127.0.0.1:{upstream.server_address[1]}",
            http_port=http_port,
            https_port=https_port,
        )
    )
    env = caddy_env(root)
    process = subprocess.Popen(
        [caddy_binary(), "run", "--config", str(config), "--adapter", "caddyfile"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    root_ca = Path(env["XDG_DATA_HOME"]) / "caddy/pki/authorities/local/root.crt"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "caddy exited"
            try:
                conn = connection(https_port, root_ca, source=CLIENT, sni=site["site"])
                conn.request(
                    "GET",
                    "/v1/models",
                    headers={"Host": site["site"], "Authorization": f"Bearer {sent_key}"},
                )
                status: int = conn.getresponse().status
                conn.close()
                if root_ca.exists():
                    return status
            except (OSError, ssl.SSLError):
                pass
            assert time.monotonic() < deadline, "caddy did not serve within 30 s"
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=10)
        upstream.shutdown()


CLIENT = "127.0.0.2"
"""The client's loopback address: caddy always admits 127.0.0.1 (the host's own check)."""


def client_allowed(cidrs: list[str]) -> bool:
    return any(ipaddress.ip_address(CLIENT) in ipaddress.ip_network(c) for c in cidrs)


@pytest.mark.parametrize("case", ADMITTED, ids=[admitted_id(c) for c in ADMITTED])
def test_an_admitted_tricky_string_renders_and_runs_as_data(
    case: tuple[str, Path_, str, str], sandbox: Path
) -> None:
    component, path, kind, template = case
    cls, args_type, base = COMPONENTS[component]
    value = template.replace("{sandbox}", str(sandbox))
    if component == "VllmRocmServer":
        defaults = base(base_dir=str(sandbox / "base"), model_dir=str(sandbox / "models"))
    else:
        defaults = base()
    args = with_string(defaults, path, kind, value)
    assert input_problems(args, args_type) == [], "the grammars admit it"
    rendered = run_program(lambda: cls("tricky", args) and None, {}, [], stack="test")
    run_scripts(rendered, sandbox)
    assert not (sandbox / MARK).exists(), f"{admitted_id(case)}: the payload ran"
    texts = [*rendered.commands.values(), *(b.decode() for b in rendered.files.values())]
    texts += [json.dumps(m) for m in rendered.manifests]
    if path[-1] not in FREE_TEXT and path[0] != "connection":
        # The value arrives whole where it is used, not cut or re-quoted into something else
        # (the SSH connection is a secret input of each command: the render shows no value).
        assert any(value in text for text in texts), "the value is nowhere in what was rendered"
    if component == "VllmRocmServer":
        assert "docker compose" in (sandbox / "calls.log").read_text(), "the scripts ran"
        assert (
            rendered.files[f"{sandbox}/base/Caddyfile"].decode()
            == generated_header("test")
            + caddyfile(
                args["caddy"],
                upstream=f"vllm:{args['flags']['port']}",
                metrics=metrics_site(args["metrics"]),
                max_model_len=args["flags"]["max_model_len"],
            )
            if path[0] != "base_dir"
            else True
        )
        if path[0] == "caddy" or path[-1] == "api_key":
            site, key = args["caddy"], args["api_key"]
            expected = 200 if client_allowed(site["allowed_cidrs"]) else 403
            assert live_caddy_status(site, key, key, sandbox) == expected
            if expected == 200:
                assert live_caddy_status(site, key, "wrong", sandbox) == 401
    RAN.add(admitted_id(case))


def test_the_admitted_set_is_not_empty_and_every_case_ran() -> None:
    """Runs after the cases above (file order): the render-and-run half is not vacuous."""
    assert len(ADMITTED) >= 20
    assert {admitted_id(c) for c in ADMITTED} == RAN
