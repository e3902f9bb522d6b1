"""`llm-infra verify STACK`: the deployed endpoint's answers against the stack's expectations."""

from __future__ import annotations

import argparse
import sys

from components.payloads import verify
from infra.cli.common import EXIT_CONFIG, Subparsers, add_stack_argument, report_config_error
from infra.config import ConfigError, FleetStack, read_stack_file
from infra.targets import endpoint_url

URL_HELP = (
    "endpoint (default: the stack's URL; e.g. http://127.0.0.1:8080 through kubectl port-forward)"
)


def add_parser(sub: Subparsers) -> None:
    """Register `verify`: the stack, --url, and every option of the verify script."""
    parser = sub.add_parser(
        "verify", help="check the deployed endpoint's answers against the stack's expectations"
    )
    add_stack_argument(parser)
    parser.add_argument("--url", help=URL_HELP)
    verify.add_options(parser, default_expect="STACK.verify.json beside the stack file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Record or check the expectations against the stack's endpoint."""
    try:
        stack_file = read_stack_file(args.stack)
        stack = stack_file.stack()
    except ConfigError as exc:
        return report_config_error(exc, f"invalid configuration in {args.stack}")
    if args.expect is None:
        args.expect = stack_file.expectations_path
    if not args.expect.is_file() and not args.record:
        print(
            f"llm-infra verify: no expectations {args.expect}: record them once against a "
            f"deployment you trust (llm-infra verify {stack_file.name} --url URL --record) and "
            "commit the file",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.min_decode_tps is None and not isinstance(stack, FleetStack):
        args.min_decode_tps = stack.server.min_decode_tps
    try:
        url = args.url or endpoint_url(stack)
    except ConfigError as exc:
        return report_config_error(exc, f"cannot verify {args.stack}")
    return verify.run(url, args)
