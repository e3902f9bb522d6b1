"""`llm-infra` run once per argv of a batch, in one process: what a test that starts a command
many times under the same limits (an address-space limit, say) uses, so that it pays for one
interpreter and its imports, not one per case.

    python -m tests.support.cli_batch < [{"argv": [...], "cwd": "DIR"}, ...]

prints `[[exit code, stdout, stderr], ...]` as JSON. Each run is `run_cli`'s: an exception that
escapes is a traceback on its stderr and exit 1, and a MemoryError is one too.
"""

from __future__ import annotations

import json
import sys

from tests.support.cli import run_cli


def main() -> None:
    runs = json.load(sys.stdin)
    results = []
    for run in runs:
        done = run_cli(run["argv"], cwd=run.get("cwd"))
        results.append([done.returncode, done.stdout, done.stderr])
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
