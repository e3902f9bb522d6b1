"""`llm-infra docs STACK`: the deployment reference, written from the typed config and the plan.

The page and its picture are written by `infra/reference/`; this command reads the stack, then
writes them or checks that the committed ones are current.
"""

import argparse
import sys

from infra.cli.common import Subparsers, add_generated_file_options, report_config_error
from infra.config import ConfigError, project_root, read_stack_file
from infra.lock import stack_model_sources
from infra.reference.page import picture_path, render_plan_picture
from infra.targets.registry import render_docs, stack_plan, with_tuned_runtimes


def add_parser(sub: Subparsers) -> None:
    """`llm-infra docs STACK [--out FILE] [--check]`."""
    parser = sub.add_parser("docs", stack=True)
    add_generated_file_options(
        parser,
        "the page to write or check (default: docs/STACK.md); its plan picture goes beside it "
        "(NAME.plan.svg)",
        "exit 1 when the file is stale",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write (or check) the stack's reference document and its plan picture."""
    try:
        stack_file = read_stack_file(args.stack)
        stack = with_tuned_runtimes(stack_file.stack(), stack_file.lock_path)
        sources = stack_model_sources(stack, stack_file.lock_path, preview=True)
        name = stack_file.name
        out = args.output_file or project_root() / "docs" / f"{name}.md"
        picture = picture_path(out)
        plan = stack_plan(stack, sources)
        pages = {
            out: render_docs(stack, sources, plan, name, picture.name),
            picture: render_plan_picture(plan, name),
        }
    except ConfigError as exc:
        return report_config_error(exc, f"invalid configuration in {args.stack}")
    if args.check:
        stale = [path for path, text in pages.items()
                 if not path.is_file() or path.read_text() != text]  # fmt: skip
        for path in stale:
            print(f"llm-infra docs: {path} is stale: run llm-infra docs {name}", file=sys.stderr)
        return 1 if stale else 0
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in pages.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0
