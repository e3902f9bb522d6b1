"""``llm-infra bench``: decode, prefill, TTFT and concurrent throughput of a served model.

The options and the printing; the measurement is the standard-library payload
``components/payloads/bench.py``, so ``bench/serve.py`` runs this command on a plain Python.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from components.payloads.bench import BenchConfig, run_bench
from components.payloads.bench_report import format_table
from components.payloads.verify import API_KEY_ENV, EndpointError

if TYPE_CHECKING:
    from infra.cli.common import Subparsers


def _config_option(p: argparse.ArgumentParser, name: str, help: str, type: type = int) -> None:
    """``--NAME`` for the BenchConfig field of that name, defaulting to the field's default."""
    p.add_argument(
        f"--{name.replace('_', '-')}", type=type, default=getattr(BenchConfig, name), help=help
    )


# The BenchConfig fields that an option of the same name sets as given.
_COPIED_FIELDS = (
    "model", "decode_requests", "decode_tokens", "prefill_requests", "prefill_words",
    "concurrent_tokens", "requests_per_stream", "timeout", "warmup_rounds", "slots",
)  # fmt: skip


def add_options(p: argparse.ArgumentParser) -> None:
    """bench's options (all but the endpoint)."""
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"bearer token (default: ${API_KEY_ENV})",
    )
    p.add_argument("--model", help="model name to send (default: /v1/models data[0].id)")
    p.add_argument(
        "--output-file",
        type=Path,
        metavar="FILE",
        help="also write the JSON report to FILE (default: print only)",
    )
    _config_option(p, "decode_requests", "single-stream decode requests (the median is reported)")
    _config_option(p, "decode_tokens", "tokens generated per decode request")
    _config_option(p, "prefill_requests", "long-prompt requests measuring prefill")
    _config_option(p, "prefill_words", "words in each prefill prompt")
    p.add_argument("--concurrency", default="1,8,64", help="comma-separated stream counts")
    _config_option(p, "concurrent_tokens", "tokens generated per request of a concurrency level")
    _config_option(p, "requests_per_stream", "requests each stream of a concurrency level sends")
    p.add_argument("--seed", type=int, help="prompt seed (default: a fresh one per run)")
    p.add_argument("--no-ignore-eos", action="store_true", help="let the model stop early")
    _config_option(
        p,
        "timeout",
        "seconds a request may go without a byte (a queued stream waits for a slot)",
        type=float,
    )
    _config_option(
        p,
        "warmup_rounds",
        "warm-up rounds: a long prompt and every level's width each (0: none)",
    )
    p.add_argument(
        "--slots",
        type=int,
        help="the server's parallel slots (default: llama-server /props total_slots); a level "
        "with more streams is labelled queued",
    )


def run(base_url: str, a: argparse.Namespace) -> int:
    """Run the benchmark against base_url and print the table; 1 on errors."""
    cfg = BenchConfig(
        concurrency=[int(c) for c in a.concurrency.split(",") if c.strip()],
        **{name: getattr(a, name) for name in _COPIED_FIELDS},
    )
    if a.seed is not None:
        cfg.seed = a.seed
    if a.no_ignore_eos:
        cfg.extra_body.pop("ignore_eos", None)
    try:
        report = run_bench(base_url, cfg, api_key=a.api_key)
    except (EndpointError, OSError, KeyError) as exc:
        print(f"llm-infra bench: {exc}", file=sys.stderr)
        return 1
    print(format_table(report))
    if a.output_file:
        a.output_file.write_text(report.to_json() + "\n")
        print(f"wrote {a.output_file}")
    return 0 if not report.errors else 1


def add_parser(sub: Subparsers) -> None:
    """Register `bench`: the stack, --url, and every option of the benchmark."""
    from infra.cli.verify import URL_HELP

    parser = sub.add_parser("bench", stack=True)
    parser.add_argument("--url", help=URL_HELP)
    parser.add_argument(
        "--server",
        help="a stack with servers: the server to measure, by name (default: the one server)",
    )
    add_options(parser)
    parser.set_defaults(run=run_stack)


def run_stack(args: argparse.Namespace) -> int:
    """Benchmark the stack's endpoint (or --url)."""
    from infra.cli.common import report_config_error
    from infra.cli.verify import one_server
    from infra.config import ConfigError, read_stack_file
    from infra.targets.registry import endpoint_url

    try:
        stack = read_stack_file(args.stack).stack()
        url = args.url
        # --url alone is enough, in a fleet too; --server picks (and checks) a fleet server.
        if args.server is not None or url is None:
            server = one_server(stack, args.server)
            url = url or endpoint_url(server)
    except ConfigError as exc:
        return report_config_error(exc, f"invalid configuration in {args.stack}")
    return run(url, args)


def main(argv: list[str] | None = None) -> int:
    """``BASE_URL [--out FILE.json] [--concurrency 1,8,64] ...``; 1 on errors."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base_url", help="e.g. http://127.0.0.1:8080 (no /v1)")
    add_options(p)
    a = p.parse_args(argv)
    return run(a.base_url, a)
