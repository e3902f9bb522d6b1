"""How every command reports bad input: one line per problem, exit status 2, no traceback."""

from __future__ import annotations

import sys

from infra.config import ConfigError

EXIT_CONFIG = 2


def report_config_error(exc: ConfigError, what: str) -> int:
    """Print `llm-infra: WHAT:` and the problems, one per line, to stderr; return exit 2."""
    print(f"llm-infra: {what}:", file=sys.stderr)
    for problem in exc.problems:
        print(problem, file=sys.stderr)
    return EXIT_CONFIG
