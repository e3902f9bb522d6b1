"""`llm-infra verify STACK`: the deployed endpoint's answers against the stack's expectations,
and what the server reports of itself (llama-server's /props, vLLM's /v1/models) against what
the stack renders."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from components.payloads import verify
from infra.cli.common import EXIT_CONFIG, Subparsers, report_config_error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from infra.config import DockerHostStack, KubernetesStack, StackConfig

URL_HELP = (
    "endpoint (default: the stack's URL; e.g. http://127.0.0.1:8080 through kubectl port-forward)"
)
SERVER_HELP = (
    "a stack with servers: the server to check, by name (its URL, decode floor and "
    "STACK.SERVER.verify.json; default: the stack's one server)"
)


def add_parser(sub: Subparsers) -> None:
    """Register `verify`: the stack, --url, --server, and every option of the verify script."""
    parser = sub.add_parser("verify", stack=True)
    parser.add_argument("--url", help=URL_HELP)
    parser.add_argument("--server", help=SERVER_HELP)
    verify.add_options(
        parser, default_expect="STACK.verify.json (STACK.SERVER.verify.json) beside the stack file"
    )
    parser.set_defaults(run=run)


def one_server(stack: StackConfig, server: str | None) -> KubernetesStack | DockerHostStack:
    """The stack of the server `--server` names: a fleet needs one, a single server none."""
    from infra.config import ConfigError

    names = stack.server_names()
    singles: Sequence[KubernetesStack | DockerHostStack] = stack.server_stacks()
    if names == [None]:
        if server is not None:
            raise ConfigError(["--server: the stack has one server; leave --server out"])
        return singles[0]
    servers = dict(zip(names, singles, strict=True))
    if server is None:
        raise ConfigError([f"--server: the stack has several servers; name one of {list(servers)}"])
    if server not in servers:
        raise ConfigError([f"--server: no server {server!r}; the servers are {list(servers)}"])
    return servers[server]


def run(args: argparse.Namespace) -> int:
    """Record or check the expectations against the stack's (or one fleet server's) endpoint."""
    from infra.config import ConfigError, read_stack_file
    from infra.targets.registry import endpoint_url, server_props

    try:
        stack_file = read_stack_file(args.stack)
        stack = one_server(stack_file.stack(), args.server)
    except ConfigError as exc:
        return report_config_error(exc, f"invalid configuration in {args.stack}")
    if args.expect is None:
        args.expect = stack_file.expectations_path(args.server)
    if not args.expect.is_file() and not args.record:
        server = f" --server {args.server}" if args.server else ""
        print(
            f"llm-infra verify: no expectations {args.expect}: record them once against a "
            f"deployment you trust (llm-infra verify {stack_file.name}{server} --url URL "
            "--record) and commit the file",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.min_decode_tps is None:
        args.min_decode_tps = stack.server.min_decode_tps
    try:
        url = args.url or endpoint_url(stack)
    except ConfigError as exc:
        return report_config_error(exc, f"cannot verify {args.stack}")
    expected = None
    if args.props is None and not args.record:
        try:
            expected = server_props(stack_file.stack(), stack_file.lock_path, args.server)
        except ConfigError as exc:
            # The answers can still be checked; what the server must report cannot be built.
            print(f"server properties: not checked ({'; '.join(exc.problems)})")
    return verify.run(url, args, expected)
