"""`llm-infra tune STACK`: the runtime bake-off, and its reviewed record `STACK.tune.json`.

The options and the printing; a candidate's run is the standard-library payload
``components/payloads/tune_local.py`` and the decision ``tune_figures.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.cli.common import (
    add_output_option,
    add_stack_argument,
    print_json,
    report_config_error,
    shown_path,
)

if TYPE_CHECKING:
    from infra.cli.common import Subparsers
    from infra.config import StackFile

DEFAULT_DEPTHS = (0, 32768, 65536)
MIN_RUNS = 3


def _depths(text: str) -> tuple[int, ...]:
    try:
        depths = tuple(sorted({int(word) for word in text.split(",") if word.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected depths like 0,32768,65536") from None
    if not depths or depths[0] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected depths of 0 tokens or more")
    return depths


def _runs(text: str) -> int:
    try:
        runs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if runs < MIN_RUNS:
        raise argparse.ArgumentTypeError(
            f"{runs}: at least {MIN_RUNS} runs, so that a median and a spread exist"
        )
    return runs


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be 1 or more")
    return value


def add_parser(sub: Subparsers) -> None:
    """Register `tune`."""
    p = sub.add_parser("tune", help="the runtime bake-off on this machine; the winner's record")
    add_stack_argument(p)
    p.add_argument(
        "--server",
        help="a stack with servers: the server to tune, by name (default: the stack's one server)",
    )
    p.add_argument(
        "--local", type=Path, metavar="CANDIDATES", required=True,
        help="run the candidates on this machine: a JSON list of {name, runtime, command, env, "
        "setArgs, current} (docs/tune.md)",
    )  # fmt: skip
    p.add_argument(
        "--model", type=Path,
        help="the model file to load (default: the rendered -m path, which must exist here)",
    )  # fmt: skip
    p.add_argument(
        "--expect", type=Path,
        help="verify expectations every candidate must pass (default: the stack's "
        "STACK.verify.json)",
    )  # fmt: skip
    p.add_argument("--runs", type=_runs, default=MIN_RUNS, help="measured runs per depth (>= 3)")
    p.add_argument(
        "--depths", type=_depths, default=DEFAULT_DEPTHS,
        help="context depths in tokens, comma-separated (those that fit a slot are measured)",
    )  # fmt: skip
    p.add_argument("--prefill-tokens", type=_positive, default=512, help="new tokens per run")
    p.add_argument("--decode-tokens", type=_positive, default=64, help="tokens decoded per run")
    p.add_argument(
        "--load-timeout", type=_positive, default=1800, help="seconds a candidate may load"
    )
    p.add_argument(
        "--output-file", type=Path, metavar="FILE",
        help="where the record goes (default: STACK.tune.json beside the stack file)",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the table, write no record")
    add_output_option(p, "tune")
    p.set_defaults(run=run)


def server_argv(stack_file: StackFile, server: str | None) -> list[str]:
    """The llama-server argv (without the executable) the stack renders for the server."""
    from infra import program, render
    from infra.cli.verify import one_server
    from infra.config import ConfigError, StrixHaloStack

    chosen = one_server(stack_file.stack(), server)
    if not isinstance(chosen, StrixHaloStack):
        raise ConfigError(
            ["server.runtime: tune picks among llama.cpp runtimes; this stack runs vLLM"]
        )
    rendered = render.run_program(
        program.main, stack_file.config, stack_file.secret_keys, stack=stack_file.name
    )
    for manifest in rendered.manifests:
        if manifest.get("kind") != "Deployment":
            continue
        if manifest["metadata"]["name"] != chosen.server.resource_name:
            continue
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "llama-server":
                return [str(word) for word in container["args"]]
    raise ConfigError([f"server: the render has no llama-server of {chosen.server.resource_name}"])


def run(args: argparse.Namespace) -> int:
    """Run every candidate, decide, print the table and write the record."""
    from components.llamacpp.runtimes import record_problems
    from components.payloads import tune_figures, tune_local, verify
    from infra.config import ConfigError, read_stack_file
    from infra.config.stack import tune_path_for
    from infra.tune import tune_record_problems

    try:
        stack_file = read_stack_file(args.stack)
        stack_args = server_argv(stack_file, args.server)
    except ConfigError as exc:
        return report_config_error(exc, f"cannot tune {args.stack}")
    problems = []
    try:
        candidates = tune_local.load_candidates(args.local)
    except (OSError, ValueError) as exc:
        problems.append(f"--local: {exc}")
        candidates = []
    for candidate in candidates:
        problems += [
            f"--local: candidate {candidate.name!r}: runtime{'.' + key if key else ''}: {problem}"
            for key, problem in record_problems(candidate.runtime)
        ]
    model = args.model or Path(stack_args[stack_args.index("-m") + 1])
    if not model.is_file():
        problems.append(f"--model: {shown_path(model)} is not a file here (give the model's path)")
    expect = args.expect or stack_file.expectations_path(args.server)
    expectations: dict[str, Any] = {}
    try:
        expectations = verify.load_expectations(expect)
    except (OSError, ValueError) as exc:
        problems.append(
            f"--expect: {exc}: every candidate must pass verify (record expectations once "
            "with `llm-infra verify STACK --url URL --record` against a server you trust)"
        )
    if problems:
        return report_config_error(ConfigError(problems), f"cannot tune {args.stack}")
    results = []
    with tempfile.TemporaryDirectory(prefix="llm-infra-tune-") as work:
        for candidate in candidates:
            print(f"tune: {candidate.name}: loading", file=sys.stderr)
            result = tune_local.run_candidate(
                candidate, stack_args, model=model, port=_free_port(), workdir=Path(work),
                expectations=expectations, depths=args.depths, runs=args.runs,
                prefill_tokens=args.prefill_tokens, decode_tokens=args.decode_tokens,
                load_timeout=args.load_timeout, api_key=os.environ.get(verify.API_KEY_ENV) or None,
            )  # fmt: skip
            print(f"tune: {candidate.name}: {result.rejection or 'measured'}", file=sys.stderr)
            results.append(result)
    depths = sorted({d.depth for r in results for d in r.depths})
    winner = tune_figures.decide(results, depths)
    record = tune_figures.tune_record(
        stack_file.name, args.server, results, winner, depths=depths, runs=args.runs,
        where="local",
    )  # fmt: skip
    wrong = tune_record_problems(record, stack_file.name, args.server)
    if wrong:  # the writer and the reader (`server.runtime: tuned`) disagree: a bug of ours
        raise RuntimeError(f"the tune record would not be read back: {wrong}")
    out = args.output_file or tune_path_for(stack_file.lock_path, args.server)
    if not args.dry_run:
        out.write_text(json.dumps(record, indent=2) + "\n")
    if args.output == "json":
        print_json(record)
    else:
        print(tune_figures.format_table(results, depths))
        if winner is None:
            print("no candidate passed: the record names no winner")
        else:
            print(f"winner: {winner.name} ({winner.reason})")
        if not args.dry_run:
            print(f"wrote {shown_path(out)}: review it, then `server.runtime: tuned` uses it")
    return 0 if winner is not None else 1


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
