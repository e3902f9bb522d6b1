"""Stack fields made from the component inputs they feed: one declaration per input.

A stack field that feeds a component input takes the input's type alias (its bound or
pattern) and, through `declared`, the input's default and docs: the stack file, a Python
program and the provider then accept the same values and get the same defaults. Where the
stack file means something else on purpose, `STACK_OWN` says so.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import PydanticUndefined

from components.field_docs import field_docs
from components.validation import declared_defaults, with_defaults
from components.validation_annotations import type_hints

STACK_OWN: dict[str, str] = {
    "metrics": "a stack file's llama-server has metrics unless it says otherwise; the "
    "component's `metrics` input is opt-in (absent: no metrics)",
    "metrics.enabled": "the stack's switch for the whole `metrics` input (`--metrics` with it)",
    "metrics.scrapers": "a stack file admits the `monitoring` namespace's Prometheus unless it "
    "names others; the component admits no scraper it is not given",
    "metrics.dashboard": "a stack file gets the Grafana dashboard unless it says otherwise; "
    "the component makes one only when asked",
    "network.clients": "a stack file's NetworkPolicy admits LiteLLM unless it names other "
    "clients; the component without `allowed_clients` creates no policy at all",
    "network.policies": "one switch for every NetworkPolicy of the stack (the server's and the "
    "fetch Job's), so its docs are the stack's own; its default is the fetch Job's",
    "server.rpc.workers.nodeSelector": "a stack file's worker is one node, which the plan "
    "checks against its vramGib: it must name that node; the component places a worker "
    "wherever the labels it is given allow",
    "metrics.gpuExporter.image": "the block's presence runs the exporter, so its image has a "
    "pinned default; the component's absent image means no exporter",
}
"""Stack keys whose bound or default differs from the input they feed, on purpose: why."""


def declared(args_type: type, name: str, model: type[BaseModel] | None = None) -> Any:
    """The stack field of input `name` of `args_type`: the input's default (none where the
    input is required; None where it is optional without one) and its docs. `model`: the stack
    model a TypedDict default becomes."""
    docs = field_docs(args_type).get(name)
    if name in getattr(args_type, "__required_keys__", frozenset()):
        return Field(description=docs)
    default = declared_defaults(args_type).get(name, PydanticUndefined)
    if default is PydanticUndefined:
        return Field(None, description=docs)
    default = with_defaults(default, type_hints(args_type)[name])
    if model is not None:
        default = model.model_validate(default)
    return Field(default, description=docs)
