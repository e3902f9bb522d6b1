"""The components' Args types as a Python user meets them: help(), type hints, imports."""

from __future__ import annotations

import ast
import copy
import pydoc
import re
import subprocess
import sys
import typing

import pytest
from typing_extensions import is_typeddict

import components
from components.field_docs import field_docs
from components.k8s.pod_security import DEFAULT_UID
from components.validation import checked_inputs, declared_defaults, with_defaults
from tests.conftest import ROOT

ARGS = [
    "GgufModelStoreArgs",
    "LlamaCppVulkanServerArgs",
    "LlamaCppRpcWorkerArgs",
    "VllmRocmServerArgs",
    "LlamaServerFlags",
    "CaddySite",
    "SshConnection",
    "KubernetesMonitoring",
]


@pytest.mark.parametrize("name", ARGS)
def test_type_hints_of_every_args_type_resolve(name: str) -> None:
    hints = typing.get_type_hints(getattr(components, name), include_extras=True)
    assert hints


def test_help_lists_each_field_with_its_type_whether_required_and_its_doc() -> None:
    doc = components.CaddySite.__doc__ or ""
    assert doc.startswith("The HTTPS front door")
    assert "\ntls: 'auto' | 'internal', required\n    `auto`: ACME certificates" in doc
    assert "\nallowed_cidrs: list[str (cidr)], required\n" in doc
    assert "\nallow_world: bool, optional, default False\n" in doc
    server = components.LlamaCppVulkanServerArgs.__doc__ or ""
    assert "\nservice_port: int (>= 1, <= 65535), optional\n" in server
    assert "absent: the server port" in server


def fresh_python(program: str, *options: str) -> subprocess.CompletedProcess[str]:
    """`program` run by a fresh interpreter from the checkout: what an import alone loads and
    warns needs a process that imported nothing yet."""
    return subprocess.run(
        [sys.executable, *options, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_kubernetes_only_program_imports_no_pulumi_command_and_warns_nothing() -> None:
    program = (
        "import sys\n"
        "from components import GgufModelStore, LlamaCppRpcWorker, LlamaCppVulkanServer\n"
        "assert 'pulumi_command' not in sys.modules, 'pulumi_command imported'\n"
    )
    done = fresh_python(program, "-W", "error::DeprecationWarning")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_payloads_import_no_pulumi() -> None:
    program = (
        "import sys\n"
        "import components.payloads.fetcher, components.payloads.verify\n"
        "import components.payloads.bench, components.payloads.gpu_gate\n"
        # The gate's shell too: bench/gpu_run.py runs it on a GPU machine's plain Python.
        "import components.llamacpp.gate\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'pulumi'], 'pulumi imported'\n"
    )
    done = fresh_python(program)
    assert done.returncode == 0, done.stderr


def test_importing_the_docker_host_component_warns_nothing() -> None:
    program = "from components import VllmRocmServer\nimport components.provider\n"
    done = fresh_python(program, "-W", "error::DeprecationWarning")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def _input_types() -> list[type]:
    """Every TypedDict of inputs the components take: their Args and the types nested in them."""
    roots = [getattr(components, name) for name in ARGS]
    seen: list[type] = []

    def visit(annotation: object) -> None:
        if is_typeddict(annotation) and annotation not in seen:
            seen.append(annotation)  # type: ignore[arg-type]
            for hint in typing.get_type_hints(annotation, include_extras=True).values():
                visit(hint)
        for member in typing.get_args(annotation):
            visit(member)

    for root in roots:
        visit(root)
    return seen


def test_no_input_docstring_states_a_default() -> None:
    # A default's one home is its `Default(...)` declaration: a docstring repeating it drifts.
    types = _input_types()
    assert components.LlamaServerFlags in types and components.AlertThresholds in types
    stated = [
        f"{args_type.__name__}.{field}: {doc!r}"
        for args_type in types
        for field, doc in field_docs(args_type).items()
        if re.search(r"\bdefault", doc, re.IGNORECASE)
    ]
    assert stated == []


def test_help_shows_each_declared_default_with_its_value() -> None:
    plain = pydoc.plaintext  # type: ignore[attr-defined]
    server = pydoc.render_doc(components.LlamaCppVulkanServerArgs, renderer=plain)
    assert "  run_as_user: int (>= 1, <= 2147483647), optional, default 10001\n" in server
    assert DEFAULT_UID == 10001
    shown = 0
    for args_type in _input_types():
        doc = args_type.__doc__ or ""
        for field, value in declared_defaults(args_type).items():
            line = next(line for line in doc.splitlines() if line.startswith(f"{field}: "))
            assert line.endswith(f", optional, default {value!r}"), line
            shown += 1
    assert shown >= 40


def test_help_documents_the_inputs_an_args_type_inherits() -> None:
    # The server's and the worker's GPU-access inputs are declared once, in a base TypedDict.
    for args_type in (components.LlamaCppVulkanServerArgs, components.LlamaCppRpcWorkerArgs):
        doc = args_type.__doc__ or ""
        gpu_access = "gpu_access: 'privileged' | 'device-plugin', optional, default 'privileged'"
        assert f"\n{gpu_access}\n" in doc
        assert "\n    Host path of the DRM render nodes mounted in `privileged` mode.\n" in doc


def test_fields_without_a_declared_default_show_none() -> None:
    doc = components.LlamaCppVulkanServerArgs.__doc__ or ""
    assert "\napi_key: str | None, optional\n" in doc
    assert "\nverify_image: str (valid image), optional\n" in doc


def test_checked_inputs_fill_every_declared_default_in_nested_inputs_too() -> None:
    given: dict[str, typing.Any] = {
        "connection": {"host": "gpu.example", "user": "llm", "private_key": "k", "host_key": "x"},
        "metrics": {"port": 9443, "allowed_cidrs": ["10.0.0.0/8"], "alerts": {"for_minutes": 2}},
    }
    original = copy.deepcopy(given)
    filled = with_defaults(given, components.VllmRocmServerArgs)
    assert given == original  # a new value, the caller's args unchanged
    assert filled["base_dir"] == "/opt/llm" and filled["patches"] == []
    assert filled["connection"]["port"] == 22
    assert filled["connection"]["insecure_ignore_host_key"] is False
    assert filled["metrics"]["alerts"] == {
        "for_minutes": 2,
        "stall_minutes": 10,
        "kv_cache_ratio": 0.9,
    }
    assert filled["metrics"]["reference"] == {"aggregate_tps": {}}
    # Inputs without a default stay absent: absent means None for them.
    assert "verify_expectations" not in filled and "host_key" in filled["connection"]
    assert "gpu_exporter_image" not in filled["metrics"]
    # A mutable default is each caller's own.
    none: dict[str, typing.Any] = {}
    again = with_defaults(none, components.VllmRocmServerArgs)
    again["patches"].append("x")
    assert with_defaults(none, components.VllmRocmServerArgs)["patches"] == []


def test_a_component_reads_its_inputs_with_the_defaults_filled() -> None:
    worker = {
        "namespace": "llm",
        "image": "ghcr.io/example/llama.cpp:rpc-b11434",
        "head": "llm",
        "head_pod_labels": {"app.kubernetes.io/instance": "llm"},
        "node_selector": {},
        "resources": {},
    }
    args = checked_inputs("LlamaCppRpcWorker", "w", worker, components.LlamaCppRpcWorkerArgs)
    assert {key: args[key] for key in declared_defaults(components.LlamaCppRpcWorkerArgs)} == {
        "namespace": "llm",
        "binary": "/app/ggml-rpc-server",
        "port": 50052,
        "gpu_device_path": "/dev/dri",
        "gpu_access": "privileged",
        "gpu_resource": "amd.com/gpu",
        "run_as_user": DEFAULT_UID,
    }
    assert "threads" not in args


def test_no_component_writes_a_declared_default_again() -> None:
    # `args.get("port", 50052)` beside `Default(RPC_PORT)` would be a second home.
    names = {field for args_type in _input_types() for field in declared_defaults(args_type)}
    again = []
    for path in sorted((ROOT / "components").rglob("*.py")):
        if "payloads" in path.parts:
            continue  # stand-alone scripts: they read JSON documents, not the inputs
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault", "pop")
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in names
            ):
                again.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert again == []
