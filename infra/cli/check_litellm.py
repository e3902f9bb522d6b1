"""`llm-infra check-litellm PATH [--stack STACK]`: does a LiteLLM config route to our stacks?

A LiteLLM proxy config (`litellm.yaml`) lists `model_list` entries of `model_name` and
`litellm_params` (`model`, `api_base`, ...). For each stack, the check fails when no entry's
`model_name` is the stack's alias (strix-halo: `server.alias`; mi300x: `server.servedModelName`)
and warns when the matching entry's `api_base` is not the stack's URL (what the stack exports as
`litellmModel`): clients would get "model not found", or reach another server.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.cli.common import Subparsers, print_json, report_config_error
from infra.config import ConfigError, StackFile, project_root, read_stack_file
from infra.targets.registry import route, routes

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
# LiteLLM's way of reading a value from its environment: not a URL we can compare.
_ENV_REFERENCE = "os.environ/"


class LitellmError(Exception):
    """A file that cannot be read as what it should be (exit 2)."""


@dataclass(frozen=True)
class StackRoute:
    """What LiteLLM must route for one stack: the model name clients send, and where to."""

    stack: str
    alias: str
    api_base: str


@dataclass
class Report:
    """The outcome for one stack: errors fail the check, warnings do not."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _mapping(values: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = values.get(key) or {}
    return value if isinstance(value, Mapping) else {}


def stack_route(stack_file: StackFile) -> StackRoute:
    """The model name and `/v1` base URL of a stack: its `litellmModel` output, from its config."""
    entry = route(stack_file.stack())
    return StackRoute(stack_file.name, entry["model_name"], entry["litellm_params"]["api_base"])


def stack_routes(stack_file: StackFile) -> list[StackRoute]:
    """Every route of a stack: one per server (a fleet's `litellmModelList`)."""
    stack = stack_file.stack()
    return [
        StackRoute(
            stack_file.name if name is None else f"{stack_file.name} ({name})",
            entry["model_name"],
            entry["litellm_params"]["api_base"],
        )
        for name, entry in zip(stack.server_names(), routes(stack), strict=True)
    ]


def model_list(path: Path) -> list[Mapping[str, Any]]:
    """The `model_list` entries of a LiteLLM config file."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LitellmError(f"cannot read LiteLLM config {path}: {exc}") from exc
    entries = document.get("model_list") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise LitellmError(f"{path}: no `model_list:` list (is this a LiteLLM proxy config?)")
    return [entry for entry in entries if isinstance(entry, Mapping)]


def _normal(url: str) -> str:
    return url.strip().rstrip("/").lower()


def check_routes(entries: list[Mapping[str, Any]], route: StackRoute) -> Report:
    """Errors and warnings of a LiteLLM model_list for one stack's route."""
    report = Report()
    matching = [entry for entry in entries if entry.get("model_name") == route.alias]
    if not matching:
        names = sorted({str(e.get("model_name")) for e in entries if e.get("model_name")})
        report.errors.append(
            f"stack {route.stack}: no model_list entry has model_name {route.alias!r} "
            f"(found: {', '.join(names) or 'none'}); add one with litellm_params.api_base "
            f"{route.api_base}"
        )
        return report
    for index, entry in enumerate(matching, start=1):
        params = _mapping(entry, "litellm_params")
        api_base = params.get("api_base")
        where = f"stack {route.stack}: model_name {route.alias!r}"
        if len(matching) > 1:
            where += f" (entry {index} of {len(matching)})"
        if not isinstance(api_base, str) or not api_base:
            report.warnings.append(f"{where} has no litellm_params.api_base; want {route.api_base}")
        elif api_base.startswith(_ENV_REFERENCE):
            report.warnings.append(
                f"{where}: api_base is read from {api_base!r}, which cannot be checked here; "
                f"it should be {route.api_base}"
            )
        elif _normal(api_base) != _normal(route.api_base):
            report.warnings.append(
                f"{where}: api_base {api_base} is not the stack's URL {route.api_base}"
            )
    return report


def _stack_files(stack: str | None) -> list[StackFile]:
    if stack is not None:
        return [read_stack_file(stack)]
    found = sorted((project_root() / "stacks").glob("Pulumi.*.yaml"))
    return [read_stack_file(path) for path in found]


def add_parser(sub: Subparsers) -> None:
    """`llm-infra check-litellm PATH [--stack STACK]`."""
    parser = sub.add_parser("check-litellm", output=True)
    parser.add_argument("path", type=Path, help="LiteLLM proxy config (litellm.yaml)")
    parser.add_argument(
        "--stack", help="stack name or stack file (default: every stacks/Pulumi.*.yaml)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the routes; 0 routed, 1 a model name missing, 2 unreadable input."""
    try:
        entries = model_list(args.path)
        stacks = _stack_files(args.stack)
        if not stacks:
            raise LitellmError("no stack files in stacks/")
        reports = []
        for stack_file in stacks:
            for checked in stack_routes(stack_file):
                reports.append((checked, check_routes(entries, checked)))
    except LitellmError as exc:
        print(f"llm-infra check-litellm: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        return report_config_error(exc, "invalid stack configuration")
    failed = any(report.errors for _, report in reports)
    if args.output == "json":
        print_json(
            {
                "config": str(args.path),
                "routed": not failed,
                "routes": [
                    {
                        "stack": checked.stack,
                        "model_name": checked.alias,
                        "api_base": checked.api_base,
                        "routed": not report.errors,
                        "errors": report.errors,
                        "warnings": report.warnings,
                    }
                    for checked, report in reports
                ],
            }
        )
        return EXIT_MISMATCH if failed else EXIT_OK
    for checked, report in reports:
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        for error in report.errors:
            print(f"error: {error}", file=sys.stderr)
        if not report.errors:
            print(f"stack {checked.stack}: {checked.alias!r} is routed ({args.path})")
    return EXIT_MISMATCH if failed else EXIT_OK
