"""Stack fields made from the component inputs they feed: one declaration per input.

A stack field that feeds a component input takes the input's type alias (its bound or
pattern) and, through `declared`, the input's default and docs: the stack file, a Python
program and the provider then accept the same values and get the same defaults. Where the
stack file means something else on purpose, `STACK_OWN` says so.
"""

from __future__ import annotations

STACK_OWN: dict[str, str] = {}
"""Stack keys whose bound or default differs from the input they feed, on purpose: why."""
