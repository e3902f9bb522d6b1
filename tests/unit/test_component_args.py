"""The components' Args types as a Python user meets them: help(), type hints, imports."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest

import components
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
    assert "\nallowed_cidrs: list[str (cidr)] (at least 1), required\n" in doc
    assert "\nallow_world: bool, optional\n" in doc
    server = components.LlamaCppVulkanServerArgs.__doc__ or ""
    assert "\nservice_port: int (>= 1, <= 65535), optional\n" in server
    assert "(default: the server port)" in server


def test_a_kubernetes_only_program_imports_no_pulumi_command_and_warns_nothing() -> None:
    program = (
        "import sys\n"
        "from components import GgufModelStore, LlamaCppRpcWorker, LlamaCppVulkanServer\n"
        "assert 'pulumi_command' not in sys.modules, 'pulumi_command imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_payloads_import_no_pulumi() -> None:
    program = (
        "import sys\n"
        "import components.payloads.fetcher, components.payloads.verify\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'pulumi'], 'pulumi imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_importing_the_docker_host_component_warns_nothing() -> None:
    program = "from components import VllmRocmServer\nimport components.provider\n"
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
