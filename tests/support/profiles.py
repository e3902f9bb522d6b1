"""Hypothesis profiles: `dev` for the inner loop, `ci` for CI (HYPOTHESIS_PROFILE picks one).

`ci` is hypothesis' own defaults and every test's own `max_examples`, as CI has always run
them; `dev`, the default, explores a tenth as many examples (at least 10) so that
`pytest -m "not contract"` stays quick. Neither has a deadline: an example's time on a busy
machine (the suite's own workers) is not what a property test checks, and hypothesis' 200 ms
default failed a test there that passes alone. A test that asks for more examples than the default
writes `@settings(max_examples=examples(N))`.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
DEV_EXAMPLES = 20


def load() -> None:
    """Register both profiles and load the chosen one."""
    settings.register_profile("ci", settings.get_profile("default"), deadline=None)
    settings.register_profile("dev", max_examples=DEV_EXAMPLES, deadline=None)
    if PROFILE not in ("ci", "dev"):
        raise ValueError(f"HYPOTHESIS_PROFILE: {PROFILE!r} is not a profile (allowed: ci, dev)")
    settings.load_profile(PROFILE)


def examples(ci: int) -> int:
    """A test's number of examples: ``ci`` under the ci profile, a tenth (at least 10) else."""
    return ci if PROFILE == "ci" else max(ci // 10, 10)
