"""The stack file's JSON Schema: generated from the models, current, accepting every stack."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra.config.base import LOCATION_KEYS, SECRET_KEYS
from infra.config.schema import (
    STACK_MODELS,
    configuration_reference,
    explain,
    stack_file_schema,
)
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
STACK_FILES = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(stack_file_schema())


def llm_infra(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cwd=ROOT)


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def test_the_checked_in_schema_is_the_generated_one() -> None:
    result = llm_infra("schema", "--check")
    assert result.returncode == 0, result.stderr
    jsonschema.Draft202012Validator.check_schema(stack_file_schema())


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_every_stack_file_is_valid_and_names_the_schema_for_editors(path: Path) -> None:
    assert path.read_text().startswith(
        "# yaml-language-server: $schema=../docs/stack.schema.json\n"
    )
    assert list(VALIDATOR.iter_errors(load(path))) == []


def test_what_pulumi_writes_into_a_stack_file_is_accepted() -> None:
    document = load(ROOT / "stacks" / "Pulumi.mi300x.yaml")
    document["encryptionsalt"] = "v1:abc:def"
    document["config"]["llm-infra:apiKey"] = {"secure": "v1:ciphertext"}
    document["config"]["llm-infra:sshPrivateKey"] = {"secure": "v1:ciphertext"}
    document["config"]["command:someSetting"] = "x"
    assert list(VALIDATOR.iter_errors(document)) == []


def strix() -> dict[str, Any]:
    return copy.deepcopy(load(ROOT / "stacks" / "Pulumi.strix-halo.yaml"))


def _unknown_top_level_key(config: dict[str, Any]) -> None:
    config["llm-infra:servr"] = {}


def _unknown_nested_key(config: dict[str, Any]) -> None:
    config["llm-infra:server"]["contextSiz"] = 1


def _wrong_type(config: dict[str, Any]) -> None:
    config["llm-infra:server"]["gpuLayers"] = "forty"


def _unknown_target(config: dict[str, Any]) -> None:
    config["llm-infra:target"] = "nomad"


def _plaintext_secret(config: dict[str, Any]) -> None:
    config["llm-infra:hfToken"] = "hf_plaintext"


def _missing_server(config: dict[str, Any]) -> None:
    del config["llm-infra:server"]


@pytest.mark.parametrize(
    "edit",
    [
        _unknown_top_level_key,
        _unknown_nested_key,
        _wrong_type,
        _unknown_target,
        _plaintext_secret,
        _missing_server,
    ],
)
def test_structural_mistakes_are_rejected_by_the_schema_and_by_the_reader(
    edit: Any, tmp_path: Path
) -> None:
    document = strix()
    edit(document["config"])
    assert list(VALIDATOR.iter_errors(document)) != []
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump(document))
    assert llm_infra("plan", str(path)).returncode == 2


def test_the_schema_has_exactly_the_models_fields() -> None:
    variants = stack_file_schema()["properties"]["config"]["anyOf"]
    assert [v["title"] for v in variants] == [m.__name__ for m in STACK_MODELS]
    for variant, model in zip(variants, STACK_MODELS, strict=True):
        fields = {info.alias or name for name, info in model.model_fields.items()}
        expected = {f"llm-infra:{key}" for key in (*fields, *SECRET_KEYS, *LOCATION_KEYS)}
        assert set(variant["properties"]) == expected


def test_explain_gives_type_default_and_the_fields_docstring() -> None:
    lines = explain("host.hostKey")
    assert lines[0] == "host.hostKey (DockerHostStack): string | null"
    assert lines[1] == "  default: None"
    assert any("ssh-keyscan -t ed25519 HOST" in line for line in lines[2:])
    assert explain("target")[:2] == ["target (KubernetesStack): 'kubernetes'", "  required"]


def test_explain_of_an_unknown_key_names_the_closest() -> None:
    result = llm_infra("explain", "server.contextSiz")
    assert result.returncode == 2
    assert "no stack has a key 'server.contextSiz'; did you mean server.contextSize" in (
        result.stderr
    )
    known = llm_infra("explain", "store.size")
    assert known.returncode == 0 and known.stdout.startswith("store.size (KubernetesStack): ")
    assert json.loads(llm_infra("schema").stdout) == stack_file_schema()


def test_the_configuration_reference_is_current_lists_every_key_and_is_linked() -> None:
    result = llm_infra("schema", "--format", "markdown", "--check")
    assert result.returncode == 0, result.stderr
    text = (ROOT / "docs" / "configuration.md").read_text()
    for model in STACK_MODELS:
        assert f"\n## {model.__name__}\n" in text
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` | " in text, (model.__name__, name)
    assert "| `host.hostKey` | string \\| null |  | `null` | The host's public key" in text
    assert "[docs/configuration.md](docs/configuration.md)" in (ROOT / "README.md").read_text()


def test_every_key_of_the_reference_has_a_description() -> None:
    undocumented = []
    for line in configuration_reference().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if line.startswith("| `") and cells[-1] == "":
            undocumented.append(cells[0])
    assert undocumented == [], "stack keys without a docstring under their field: " + ", ".join(
        undocumented
    )


def test_a_stale_reference_fails_the_check(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# old\n")
    result = llm_infra("schema", "--format", "markdown", "--check", "--output-file", str(stale))
    assert result.returncode == 1
    assert "is not current: run llm-infra schema --format markdown --output-file" in result.stderr


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("temperature", 150, "100"),
        ("parallel", 2048, "1024"),
        ("threads", 5000, "4096"),
        ("nPredict", 2**31, "2147483647"),
        ("nPredict", -2, "-1"),
    ],
)
def test_a_value_past_the_components_bound_is_refused_by_the_schema_and_by_the_reader(
    key: str, value: int, bound: str, tmp_path: Path
) -> None:
    """The stack field is the component input's own declaration: its upper bound too."""
    document = strix()
    document["config"]["llm-infra:server"][key] = value
    assert list(VALIDATOR.iter_errors(document)) != []
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump(document))
    result = llm_infra("plan", str(path))
    assert result.returncode == 2
    assert f"server.{key}: " in result.stderr and bound in result.stderr
    assert "Traceback" not in result.stderr
