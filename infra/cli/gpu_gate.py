"""`llm-infra gpu-gate --log FILE`: fail unless the load log shows the layers on a GPU."""

from __future__ import annotations

from components.payloads import gpu_gate
from infra.cli.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    """Register `gpu-gate` with the gate's own options."""
    parser = sub.add_parser("gpu-gate")
    gpu_gate.add_options(parser)
    parser.set_defaults(run=gpu_gate.run)
