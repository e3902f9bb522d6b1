"""`llm-infra schema` and `llm-infra explain KEY`: the stack file JSON Schema, one key's docs."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

from infra.cli.common import EXIT_CONFIG, Subparsers, add_generated_file_options

SCHEMA_FILE = Path("docs") / "stack.schema.json"
"""Where the checked-in schema lives (the stack files' yaml-language-server comment names it)."""
REFERENCE_FILE = Path("docs") / "configuration.md"
"""Where the checked-in key reference lives (the README links to it)."""


def add_parsers(sub: Subparsers) -> None:
    """Register `schema` and `explain`."""
    schema = sub.add_parser("schema")
    add_generated_file_options(
        schema,
        "write the schema to FILE (default: print it)",
        f"exit 1 when {SCHEMA_FILE} ({REFERENCE_FILE} with --format markdown; or --output-file) "
        "is not current",
    )
    schema.add_argument(
        "--format",
        choices=("json", "markdown"),
        default="json",
        help=f"json: the schema ({SCHEMA_FILE}); markdown: the key reference ({REFERENCE_FILE})",
    )
    schema.set_defaults(run=run_schema)
    explain = sub.add_parser("explain")
    explain.add_argument("key", help="a stack key, dotted (server.contextSize, store.size)")
    explain.set_defaults(run=run_explain)


def schema_text() -> str:
    """The schema as it is checked in: indented JSON and a final newline."""
    from infra.config.schema import stack_file_schema

    return json.dumps(stack_file_schema(), indent=2) + "\n"


def run_schema(args: argparse.Namespace) -> int:
    """Print, write or check the schema."""
    from infra.config import project_root

    if args.format == "markdown":
        from infra.config.schema import configuration_reference

        text, default = configuration_reference(), REFERENCE_FILE
    else:
        text, default = schema_text(), SCHEMA_FILE
    if args.check:
        target = args.output_file or project_root() / default
        if not target.is_file() or target.read_text() != text:
            print(
                f"llm-infra schema: {target} is not current: run "
                f"llm-infra schema --format {args.format} --output-file {target}",
                file=sys.stderr,
            )
            return 1
        return 0
    if args.output_file:
        temporary = args.output_file.with_name(f".{args.output_file.name}.tmp")
        try:
            temporary.write_text(text)
            temporary.replace(args.output_file)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            print(
                f"llm-infra schema: cannot write {args.output_file} ({exc.strerror or exc}); "
                "it is left as it was",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        print(f"wrote {args.output_file}")
        return 0
    sys.stdout.write(text)
    return 0


def _all_keys() -> list[str]:
    """Every dotted key of every stack model (for did-you-mean)."""
    from infra.config.schema import stack_file_schema

    schema = stack_file_schema()
    keys: list[str] = []

    def walk(node: dict[str, object], prefix: str, depth: int) -> None:
        from infra.config.schema import _children

        if depth > 6:
            return
        for child in _children(schema, node):
            properties = child["properties"]
            assert isinstance(properties, dict)
            for name, value in properties.items():
                key = prefix + str(name).removeprefix("llm-infra:")
                keys.append(key)
                walk(value, key + ".", depth + 1)

    for variant in schema["properties"]["config"]["anyOf"]:
        walk(variant, "", 0)
    return sorted(set(keys))


def run_explain(args: argparse.Namespace) -> int:
    """Print the key's documentation; exit 2 (with the closest keys) when no stack has it."""
    from infra.config.schema import explain

    lines = explain(args.key)
    if not lines:
        close = difflib.get_close_matches(args.key, _all_keys(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        print(f"llm-infra explain: no stack has a key {args.key!r}{hint}", file=sys.stderr)
        return EXIT_CONFIG
    print("\n".join(lines))
    return 0
