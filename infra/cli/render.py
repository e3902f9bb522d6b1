"""`llm-infra render STACK [--out DIR]`: write what a stack would create, offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.cli.common import Subparsers, print_json, report_config_error, shown_path
from infra.config import ConfigError, read_stack_file


def add_parser(sub: Subparsers) -> None:
    """Register `render`."""
    parser = sub.add_parser("render", stack=True, output=True)
    parser.add_argument("--out", type=Path, help="output directory (default: rendered/STACK)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Render the stack into the output directory; exit 2 on invalid configuration."""
    # Imported here: pulumi and its Kubernetes SDK are slow to import, and `fetch` needs neither.
    from infra import program, render, render_out

    try:
        stack_file = read_stack_file(args.stack)
    except ConfigError as exc:
        return report_config_error(exc, f"cannot render {args.stack}")
    try:
        rendered = render.run_program(
            program.main, stack_file.config, stack_file.secret_keys, stack=stack_file.name
        )
    except ConfigError as exc:
        return report_config_error(exc, f"invalid configuration in {shown_path(stack_file.path)}")
    out = args.out or Path("rendered") / stack_file.name
    try:
        written = render_out.write(rendered, out)
    except ConfigError as exc:
        return report_config_error(exc, f"cannot write {out}")
    warnings = rendered.warnings + [
        f"image {image} floats (no digest, no build tag): each pull may run another build"
        for image in render.floating_images(rendered)
    ]
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.output == "json":
        print_json(
            {
                "stack": stack_file.name,
                "out": str(out),
                "resources": len(rendered.resources),
                "kubernetes_objects": len(rendered.manifests),
                "files": [str(path) for path in written],
                "warnings": warnings,
            }
        )
        return 0
    print(
        f"rendered stack {stack_file.name}: {len(rendered.resources)} resources, "
        f"{len(rendered.manifests)} Kubernetes objects → {out}/"
    )
    for path in written:
        print(f"  {path}")
    return 0
