"""The `llm-infra` command line: one module per command, each registering its own parser."""

from __future__ import annotations

import argparse
import sys

from infra.cli import (
    bench,
    check_litellm,
    diff,
    docs,
    fetch,
    gpu_gate,
    lock,
    plan,
    render,
    verify,
)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser of `llm-infra` and its subcommands' parsers by name."""
    parser = argparse.ArgumentParser(
        prog="llm-infra", description="Deploy large LLM servers on AMD hardware with Pulumi."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (render, lock, plan, verify, bench, gpu_gate, diff, check_litellm, docs):
        module.add_parser(sub)
    fetch.add_parsers(sub)
    return parser, dict(sub.choices)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `llm-infra` console script."""
    parser, commands = build_parser()
    args, unknown = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if unknown:
        # The subcommand's own usage, so the user sees the options of what they typed.
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    status: int = args.run(args)
    return status
