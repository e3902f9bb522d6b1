"""`llm-infra fetch` and `llm-infra check-model`: the fetcher the Job and the host run, at hand."""

from __future__ import annotations

from components.payloads import fetcher
from infra.cli.common import Subparsers


def add_parsers(sub: Subparsers) -> None:
    """Register `fetch` and `check-model` with the fetcher's own options."""
    fetch = sub.add_parser("fetch")
    fetcher.add_fetch_options(fetch)
    fetch.set_defaults(run=fetcher.run_fetch)
    check = sub.add_parser("check-model")
    fetcher.add_check_options(check)
    check.set_defaults(run=fetcher.run_check)
