"""`llm-infra plan STACK`: the memory and disk budget of a stack, before anything is downloaded."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from infra.cli.common import Subparsers, print_json, report_config_error
from infra.config import ConfigError, parse_stack, read_stack_file
from infra.config.server import ServerSettings
from infra.plan.llamacpp import Suggestion


def add_parser(sub: Subparsers) -> None:
    """Register `plan`."""
    parser = sub.add_parser("plan", stack=True, output=True)
    parser.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as -o json"
    )
    parser.add_argument(
        "--suggest",
        action="store_true",
        help="the highest -ngl and largest context that fit (a single llama.cpp server only)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="also print the plan's notes")
    parser.add_argument(
        "--headroom", type=float, default=4.0, help="GiB of VRAM --suggest keeps free (4)"
    )
    parser.add_argument(
        "--gguf",
        nargs="+",
        metavar="SHARD",
        help="plan from these GGUF files' headers (default: the lock's header summary)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 when the stack fits, 1 when it does not, 2 on bad input."""
    from components.gguf_header import GgufError, read_gguf_header, summarize
    from infra.lock import stack_model_sources
    from infra.plan.llamacpp import suggest
    from infra.plan.stack import llamacpp_inputs
    from infra.targets.registry import llamacpp_server, stack_plan, with_tuned_runtimes

    header = None
    try:
        stack_file = read_stack_file(args.stack)
        stack = with_tuned_runtimes(stack_file.stack(), stack_file.lock_path)
        sources = stack_model_sources(stack, stack_file.lock_path, preview=True)
        if args.gguf:
            headers = []
            for shard in args.gguf:
                try:
                    with Path(shard).open("rb") as handle:
                        headers.append(read_gguf_header(handle))
                except (OSError, GgufError) as exc:
                    problem = f"--gguf: cannot read the GGUF header of {shard}: {exc}"
                    raise ConfigError([problem]) from None
            try:
                header = summarize(headers)
            except GgufError as exc:
                raise ConfigError(
                    [f"--gguf: the GGUF header of {', '.join(args.gguf)}: {exc}"]
                ) from None
        single = llamacpp_server(stack)
        if args.suggest and single is None:
            raise ConfigError(
                [
                    "--suggest: only a single llama.cpp server has -ngl and a context to "
                    "suggest (target: kubernetes with one server:); set this stack's sizes "
                    "by hand from the plan"
                ]
            )
        plan = stack_plan(stack, sources, header)
        best = None
        if args.suggest and single is not None:
            inputs = llamacpp_inputs(single, sources[0], header)
            best = suggest(inputs, headroom_gib=args.headroom)
    except ConfigError as exc:
        status = report_config_error(exc, f"invalid configuration in {args.stack}")
        if args.suggest:
            # What fails may be the very sizes --suggest picks: suggest for the same stack.
            best = suggest_despite(args.stack, header if args.gguf else None, args.headroom)
            if best is not None:
                print(suggestion_text(best, args.headroom))
        return status
    if args.output == "json":
        document = plan.to_json()
        if best is not None:
            document["suggest"] = {
                "headroom_gib": args.headroom,
                "gpu_layers": best.gpu_layers,
                "context_size": best.ctx_size,
                "parallel": best.parallel,
                "memory_limit_gib": best.memory_limit_gib,
                "reason": best.reason,
                "set": suggest_changes(best),
            }
        print_json(document)
    else:
        print(plan.report(verbose=args.verbose))
        if best is not None:
            print(suggestion_text(best, args.headroom))
    return 0 if plan.fits else 1


def suggest_changes(best: Suggestion) -> dict[str, object]:
    """The stack keys a suggestion sets (empty when nothing fits)."""
    if best.gpu_layers is None or best.ctx_size is None:
        return {}
    return dict(best.changes)


def suggestion_text(best: Suggestion, headroom: float) -> str:
    """`suggest (keeping 4 GiB VRAM free): server.gpuLayers: 42, server.contextSize: ...`, or
    the constraint that leaves nothing to suggest."""
    changes = suggest_changes(best)
    if not changes:
        return f"suggest: nothing fits: {best.reason}"
    keys = ", ".join(f"{key}: {value}" for key, value in changes.items())
    return f"suggest (keeping {headroom:g} GiB VRAM free): {keys}"


def suggest_despite(
    stack: str, header: dict[str, Any] | None, headroom: float
) -> Suggestion | None:
    """A suggestion for a single-server stack whose context settings are what its checks
    refuse: planned at the smallest context they allow (server.minSlotContext per slot, and
    no more than a slot serves), so the suggestion replaces them. None when something else
    is wrong as well."""
    from infra.lock import stack_model_sources
    from infra.plan.llamacpp import suggest
    from infra.plan.stack import llamacpp_inputs
    from infra.targets.registry import llamacpp_server, with_tuned_runtimes

    try:
        stack_file = read_stack_file(stack)
        values = stack_file.values()
        server = values.get("server")
        if not isinstance(server, dict):
            return None
        floor = server.get(
            "minSlotContext", ServerSettings.model_fields["min_slot_context"].default
        )
        slots = server.get("parallel", 1)
        if not isinstance(floor, int) or not isinstance(slots, int) or slots < 1:
            return None
        server.update(contextSize=slots, minSlotContext=1)
        parsed = with_tuned_runtimes(parse_stack(values), stack_file.lock_path)
        single = llamacpp_server(parsed)
        if single is None:
            return None
        sources = stack_model_sources(single, stack_file.lock_path, preview=True)
        inputs = llamacpp_inputs(single, sources[0], header)
    except ConfigError:
        return None
    return suggest(
        replace(inputs, min_slot_context=floor, ctx_size=floor * slots), headroom_gib=headroom
    )
