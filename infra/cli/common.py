"""What every command shares: the stack argument, and how bad input is reported."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.config import ConfigError


class Subparsers:
    """The command list a command module adds its parser to: each command's one-line help is
    the command table's (`infra.cli.COMMANDS`), the one home of what `llm-infra --help` lists."""

    def __init__(self, actions: argparse._SubParsersAction[Any], helps: Mapping[str, str]) -> None:
        self._actions = actions
        self._helps = helps

    def add_parser(
        self, name: str, *, stack: bool = False, output: bool = False
    ) -> argparse.ArgumentParser:
        """The parser of command `name`, listed with its help; with `stack`, its first argument
        is the STACK; with `output`, its `-o json` document is described by
        `docs/json/NAME.schema.json`."""
        parser: argparse.ArgumentParser = self._actions.add_parser(name, help=self._helps[name])
        if stack:
            add_stack_argument(parser)
        if output:
            _add_output_option(parser, name)
        return parser


EXIT_CONFIG = 2


def add_stack_argument(parser: argparse.ArgumentParser) -> None:
    """The positional STACK: a stack name (`stacks/Pulumi.NAME.yaml`) or a stack file."""
    parser.add_argument("stack", help="stack name (stacks/Pulumi.NAME.yaml) or stack file")


def add_generated_file_options(
    parser: argparse.ArgumentParser, file_help: str, check_help: str
) -> None:
    """`--output-file FILE` and `--check`: a command that writes a generated file, or checks
    that the checked-in one is current."""
    parser.add_argument("--output-file", type=Path, metavar="FILE", help=file_help)
    parser.add_argument("--check", action="store_true", help=check_help)


OUTPUT_FORMATS = ("text", "json")


def _add_output_option(parser: argparse.ArgumentParser, schema: str) -> None:
    """`-o/--output text|json`: text for people, or one JSON document whose shape is documented
    by the JSON Schema `docs/json/SCHEMA.schema.json`."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="text",
        help=f"text for people, or one JSON document (its shape: docs/json/{schema}.schema.json)",
    )


def print_json(document: object) -> None:
    """One JSON document on stdout, keys sorted, as every `-o json` prints it."""
    print(json.dumps(document, indent=2, sort_keys=True))


def shown_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def report_config_error(exc: ConfigError, what: str) -> int:
    """Print `llm-infra: WHAT:` and the problems, one per line, to stderr; return exit 2."""
    print(f"llm-infra: {what}:", file=sys.stderr)
    for problem in exc.problems:
        print(problem, file=sys.stderr)
    return EXIT_CONFIG
