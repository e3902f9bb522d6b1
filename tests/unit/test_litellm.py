"""`llm-infra check-litellm`: a LiteLLM config must route each stack's model name to its URL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import cli
from infra.cli import check_litellm as litellm
from infra.config import read_stack_file
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
STRIX_URL = "http://deepseek-v4-flash-0731.llm.svc:8080/v1"
MI300X_URL = "https://llm.example.com/v1"
ALIAS = "deepseek-v4-flash-0731"


def write_config(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    """A litellm.yaml with these model_list entries (and the other keys a real one has)."""
    path = tmp_path / "litellm.yaml"
    document = {"model_list": entries, "litellm_settings": {"drop_params": True}}
    path.write_text(yaml.safe_dump(document))
    return path


def entry(name: str, api_base: str | None) -> dict[str, Any]:
    """One model_list entry."""
    params: dict[str, Any] = {"model": f"openai/{name}"}
    if api_base is not None:
        params["api_base"] = api_base
    return {"model_name": name, "litellm_params": params}


def test_routes_computed_from_the_stack_files_equal_the_rendered_outputs(tmp_path: Path) -> None:
    # The render is the truth about the URL; the check computes it without Pulumi.
    for stack in ("strix-halo", "mi300x"):
        out = tmp_path / stack
        result = run_cli(["render", stack, "--out", str(out)], cwd=ROOT)
        assert result.returncode == 0, result.stderr
        rendered = json.loads((out / "outputs.json").read_text())["litellmModel"]
        route = litellm.stack_route(read_stack_file(stack))
        assert route.alias == rendered["model_name"]
        assert route.api_base == rendered["litellm_params"]["api_base"]


def test_matching_entry_passes_quietly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, [entry("gpt-4o", None), entry(ALIAS, STRIX_URL + "/")])
    assert cli.main(["check-litellm", str(path), "--stack", "strix-halo"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert f"stack strix-halo: {ALIAS!r} is routed" in captured.out


def test_missing_model_name_fails_naming_the_alias_and_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, [entry("gpt-4o", None), entry("deepseek-v4", STRIX_URL)])
    assert cli.main(["check-litellm", str(path), "--stack", "strix-halo"]) == 1
    err = capsys.readouterr().err
    assert f"no model_list entry has model_name {ALIAS!r}" in err
    assert "found: deepseek-v4, gpt-4o" in err
    assert STRIX_URL in err


def test_wrong_api_base_warns_but_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, [entry(ALIAS, "http://old-server.llm.svc:8080/v1")])
    assert cli.main(["check-litellm", str(path), "--stack", "strix-halo"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ")
    assert f"api_base http://old-server.llm.svc:8080/v1 is not the stack's URL {STRIX_URL}" in err


def test_api_base_from_litellm_environment_is_a_warning_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, [entry(ALIAS, "os.environ/DS_API_BASE")])
    assert cli.main(["check-litellm", str(path), "--stack", "mi300x"]) == 0
    assert "cannot be checked here; it should be https://llm.example.com/v1" in (
        capsys.readouterr().err
    )


def test_without_stack_every_stack_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both stacks serve the same name: one entry routes it, so the other stack's URL is warned.
    path = write_config(tmp_path, [entry(ALIAS, MI300X_URL)])
    assert cli.main(["check-litellm", str(path)]) == 0
    captured = capsys.readouterr()
    assert "stack mi300x:" in captured.out and "stack strix-halo:" in captured.out
    assert f"stack strix-halo: model_name {ALIAS!r}: api_base {MI300X_URL}" in captured.err


def test_route_follows_namespace_service_name_and_port(tmp_path: Path) -> None:
    stack = yaml.safe_load((ROOT / "stacks/Pulumi.strix-halo.yaml").read_text())
    stack["config"]["llm-infra:kubernetes"]["namespace"] = "inference"
    stack["config"]["llm-infra:server"].update({"name": "ds", "servicePort": 80})
    path = tmp_path / "Pulumi.custom.yaml"
    path.write_text(yaml.safe_dump(stack))
    route = litellm.stack_route(read_stack_file(path))
    assert route.api_base == "http://ds.inference.svc:80/v1"


def test_mi300x_alias_is_the_served_model_name(tmp_path: Path) -> None:
    stack = yaml.safe_load((ROOT / "stacks/Pulumi.mi300x.yaml").read_text())
    stack["config"]["llm-infra:server"]["servedModelName"] = "ds-fp8"
    stack["config"]["llm-infra:caddy"].update({"site": "2001:db8::10", "tls": "internal"})
    path = tmp_path / "Pulumi.gpu.yaml"
    path.write_text(yaml.safe_dump(stack))
    route = litellm.stack_route(read_stack_file(path))
    assert (route.alias, route.api_base) == ("ds-fp8", "https://[2001:db8::10]/v1")


def test_file_that_is_not_a_litellm_config_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "litellm.yaml"
    path.write_text("general_settings: {}\n")
    assert cli.main(["check-litellm", str(path), "--stack", "strix-halo"]) == 2
    assert "no `model_list:` list" in capsys.readouterr().err


def test_unknown_stack_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, [entry(ALIAS, STRIX_URL)])
    assert cli.main(["check-litellm", str(path), "--stack", "no-such-stack"]) == 2
    assert "no stack file" in capsys.readouterr().err
