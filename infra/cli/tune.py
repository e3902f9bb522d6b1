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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.cli.common import print_json, report_config_error, shown_path

if TYPE_CHECKING:
    from components.payloads.tune_figures import CandidateResult, DecodeCeiling
    from infra.cli.common import Subparsers
    from infra.config import KubernetesStack, StackConfig, StackFile

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


def _at_least(least: int, why: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `least` (`why` says why, when refused)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value}: {why}")
        return value

    return parse


_runs = _at_least(MIN_RUNS, f"at least {MIN_RUNS} runs, so that a median and a spread exist")
_positive = _at_least(1, "must be 1 or more")


def add_parser(sub: Subparsers) -> None:
    """Register `tune`."""
    p = sub.add_parser("tune", stack=True, output=True)
    p.add_argument(
        "--server",
        help="a stack with servers: the server to tune, by name (default: the stack's one server)",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--local", type=Path, metavar="CANDIDATES",
        help="run the candidates on this machine: a JSON list of {name, runtime, command, env, "
        "setArgs, current} (docs/tune.md; no default: one of --local, --kubernetes, --collect)",
    )  # fmt: skip
    mode.add_argument(
        "--kubernetes", metavar="DIR", type=Path,
        help="write one Job per candidate runtime for the server's node into DIR, and the "
        "kubectl steps that run them (needs --stop-server; no default: one of the three modes)",
    )  # fmt: skip
    mode.add_argument(
        "--collect", type=Path, nargs="+", metavar="LOG",
        help="decide from the logs of the Jobs --kubernetes wrote (kubectl logs job/NAME; no "
        "default: one of the three modes)",
    )  # fmt: skip
    p.add_argument(
        "--runtime", action="append", default=[], metavar="RUNTIME",
        help="--kubernetes: a candidate besides the server's own runtime, by name (vulkan, "
        "rocm, cpu) or as a JSON runtime record {name, image, backend, capabilities, digest}; "
        "repeat for more (default: none but the server's own)",
    )  # fmt: skip
    p.add_argument(
        "--stop-server", action="store_true",
        help="--kubernetes: the steps scale the server to 0 for the bake-off and back to 1 "
        "after it (the node's GPU and memory hold its model; without it tune refuses)",
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
    p.set_defaults(run=run)


def llamacpp_server(stack: StackConfig, server: str | None) -> KubernetesStack:
    """The llama.cpp server `--server` names (a fleet needs one), or ConfigError."""
    from infra.cli.verify import one_server
    from infra.config import ConfigError
    from infra.targets import registry

    chosen = one_server(stack, server)
    found = registry.llamacpp_server(chosen)
    if found is None:
        raise ConfigError(["server: tune picks among llama.cpp runtimes; this stack runs vLLM"])
    return found


def server_argv(stack_file: StackFile, server: str | None) -> list[str]:
    """The llama-server argv (without the executable) the stack renders for the server."""
    from infra import program, render
    from infra.config import ConfigError

    chosen = llamacpp_server(stack_file.stack(), server)
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


def device_ceiling(stack_file: StackFile, server: str | None) -> DecodeCeiling | None:
    """The physical decode ceiling of the server's device (`memory.device`), None without one:
    the bake-off then keeps the fixed ceiling."""
    from infra.config import ConfigError
    from infra.lock import stack_model_sources
    from infra.plan.stack import physical_ceiling

    try:
        chosen = llamacpp_server(stack_file.stack(), server)
        sources = stack_model_sources(chosen, stack_file.lock_path, preview=True)
        return physical_ceiling(chosen, sources[0])
    except ConfigError:
        return None


def run(args: argparse.Namespace) -> int:
    """Run the candidates here, write the Kubernetes Jobs, or decide from their logs."""
    from infra.config import ConfigError, read_stack_file

    try:
        stack_file = read_stack_file(args.stack)
        if args.collect:
            results = _collected(args.collect)
            return _finish(args, stack_file, results, "kubernetes")
        if args.kubernetes:
            return _kubernetes(args, stack_file)
        results = _local(args, stack_file)
    except ConfigError as exc:
        return report_config_error(exc, f"cannot tune {args.stack}")
    return _finish(args, stack_file, results, "local")


def _expectations(args: argparse.Namespace, stack_file: StackFile) -> dict[str, Any]:
    from components.payloads import verify
    from infra.config import ConfigError

    expect = args.expect or stack_file.expectations_path(args.server)
    try:
        return verify.load_expectations(expect)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            [
                f"--expect: {exc}: every candidate must pass verify (record expectations once "
                "with `llm-infra verify STACK --url URL --record` against a server you trust)"
            ]
        ) from None


def _local(args: argparse.Namespace, stack_file: StackFile) -> list[CandidateResult]:
    """Every candidate of --local run on this machine."""
    from components.llamacpp.runtimes import record_problems
    from components.payloads import tune_local, verify
    from infra.config import ConfigError

    stack_args = server_argv(stack_file, args.server)
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
    expectations: dict[str, Any] = {}
    try:
        expectations = _expectations(args, stack_file)
    except ConfigError as exc:
        problems += exc.problems
    if problems:
        raise ConfigError(problems)
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
    return results


def _kubernetes(args: argparse.Namespace, stack_file: StackFile) -> int:
    """Write the Jobs and print the steps that run them."""
    from infra.config import ConfigError
    from infra.render_out import manifests_yaml
    from infra.targets.registry import with_tuned_runtimes
    from infra.tune_kubernetes import CONFIG_FILE, candidate_runtimes, job_file, steps, tune_jobs

    stack = with_tuned_runtimes(stack_file.stack(), stack_file.lock_path)
    chosen = llamacpp_server(stack, args.server)
    if not args.stop_server:
        raise ConfigError(
            [
                f"--stop-server: the bake-off runs on {chosen.server.resource_name}'s node, whose "
                "GPU and memory hold the server's model: the server must be stopped while the "
                "candidates run (the steps scale it to 0, and back to 1 as `pulumi up` last "
                "deployed it); pass --stop-server to write them"
            ]
        )
    runtimes = candidate_runtimes(chosen.server.effective_runtime, args.runtime)
    settings = {
        "depths": list(args.depths), "runs": args.runs, "prefillTokens": args.prefill_tokens,
        "decodeTokens": args.decode_tokens, "loadTimeout": args.load_timeout,
    }  # fmt: skip
    expectations = json.dumps(_expectations(args, stack_file), indent=1) + "\n"
    jobs = tune_jobs(
        stack_file, args.server, chosen, runtimes, expectations=expectations, settings=settings
    )
    out: Path = args.kubernetes
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(manifests_yaml(jobs.manifests[:2]))
    for index, (job, manifest) in enumerate(zip(jobs.jobs, jobs.manifests[2:], strict=True), 1):
        (out / job_file(index, job)).write_text(manifests_yaml([manifest]))
    lines = steps(jobs, shown_path(out), stack_file.name)
    if args.output == "json":
        print_json({"stack": stack_file.name, "out": str(out), "jobs": jobs.jobs, "steps": lines})
        return 0
    print(
        f"wrote {len(jobs.jobs)} Jobs ({', '.join(r.name for r in runtimes)}) to {shown_path(out)}/"
    )
    print("run them one at a time, with the server stopped:")
    for line in lines:
        print(f"  {line}")
    return 0


def _collected(logs: list[Path]) -> list[CandidateResult]:
    from components.payloads.tune_job import results_in_log
    from infra.config import ConfigError
    from infra.tune_kubernetes import CONFIG_FILE, run_nonce

    results, problems = [], []
    for log in logs:
        try:
            nonce = run_nonce(log.parent)
        except ValueError as exc:
            problems.append(
                f"--collect: {log}: {exc} (keep each Job's log in the folder tune --kubernetes "
                f"wrote, beside {CONFIG_FILE}, as its steps do)"
            )
            continue
        try:
            found = results_in_log(log.read_text(errors="replace"), nonce)
        except OSError as exc:
            problems.append(f"--collect: {log}: {exc.strerror or exc}")
            continue
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"--collect: {log}: a malformed result line ({exc})")
            continue
        if not found:
            problems.append(
                f"--collect: {log}: no result line (did the Job finish? kubectl logs job/NAME "
                "-c tune)"
            )
        results += found
    names = [r.name for r in results]
    problems += [
        f"--collect: two results for the candidate {name!r}" for name in sorted(set(names))
        if names.count(name) > 1
    ]  # fmt: skip
    if problems:
        raise ConfigError(problems)
    return results


def _finish(
    args: argparse.Namespace, stack_file: StackFile, results: list[CandidateResult], where: str
) -> int:
    """Decide, print the table, write the record."""
    from components.payloads import tune_figures
    from infra.config.stack import tune_path_for
    from infra.tune import tune_record_problems

    depths = sorted({d.depth for r in results for d in r.depths})
    runs = max((len(d.decode_server.values) for r in results for d in r.depths), default=args.runs)
    winner = tune_figures.decide(results, depths, device_ceiling(stack_file, args.server))
    record = tune_figures.tune_record(
        stack_file.name, args.server, results, winner, depths=depths, runs=max(runs, MIN_RUNS),
        where=where, correctness=_correctness(args, stack_file),
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
        current = next((r for r in results if r.current), None)
        if current and current.self_check and not current.self_check["passed"]:
            print(
                f"{current.name} fails its own check ({current.self_check['problem']}): no "
                "candidate is judged; record the expectations again against this runtime "
                "(llm-infra verify STACK --url URL --record), or see docs/verify-and-bench.md"
            )
        elif winner is None:
            print("no candidate passed: the record names no winner")
        else:
            print(f"winner: {winner.name} ({winner.reason})")
        if not args.dry_run:
            print(f"wrote {shown_path(out)}: review it, then `server.runtime: tuned` uses it")
    return 0 if winner is not None else 1


def _correctness(args: argparse.Namespace, stack_file: StackFile) -> str | None:
    """Verify's rule and thresholds from the expectations every candidate was held to."""
    from components.payloads import verify
    from infra.config import ConfigError

    try:
        return verify.rule_line(verify.tolerance_of(_expectations(args, stack_file)))
    except ConfigError:  # --collect with the expectations elsewhere: the Jobs carried them
        return None


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
