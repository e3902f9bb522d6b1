"""Which stack-file key each component input comes from, so the stack file names its own keys.

The components check their inputs themselves (`components.validation`); when a stack file's
values reach a component and one is refused there, the problem is reported under the stack
file's key (`server.contextSize`), not the component's input (`flags.ctx_size`). An input a
field of its own name feeds (`infra.config.feeds.FEEDS`) is named by that field's key; the
others are the deliberate renames (`RENAMED_INPUTS`).
"""

from __future__ import annotations

import re

from pydantic.alias_generators import to_camel as camel

from components.validation import ComponentInputError, Location, Problem, named, snake_path
from infra.config.feeds import COMPONENT_ARGS, FEEDS

RENAMED_INPUTS: dict[str, dict[str, str]] = {
    "LlamaCppVulkanServer": {
        "flags.model_path": "model.files",
        "flags.log_verbosity": "server.gpuGate",
        "flags.log_file": "server.gpuGate",
        "flags.metrics": "metrics.enabled",
        "flags.rpc": "server.rpc.workers",
        "flags.tensor_split": "server.rpc.workers",
        "model.claim_name": "store.name",
        "model.fetcher_config_map": "store.name",
        "model.check_image": "store.fetchImage",
        "model.run_as_user": "server.runAsUser",
        "model.model_file": "model.files",
        "model.model_bytes": "model.files",
        "supplemental_groups": "server.renderGroupId",
        "api_key": "apiKey",
        "metrics.fetch_job_pattern": "store.name",
        "verify_expectations": "server.verifyAfterUp",
        "stop_before_model_change": "store.upgrade",
    },
    "LlamaCppRpcWorker": {
        "head": "server.name",
        "supplemental_groups": "server.renderGroupId",
    },
    "GgufModelStore": {
        "fetch_timeout_seconds": "store.fetchTimeoutHours",
        "hf_token": "hfToken",
    },
    "VllmRocmServer": {
        "connection.private_key": "sshPrivateKey",
        "flags.model": "host.modelDir",
        # vLLM listens on the compose network at server.port (its address is the program's).
        "flags.host": "server.port",
        "model_lock.unresolved_patterns": "model.files",
        "metrics.gpu_exporter_image": "metrics.gpuExporter.image",
        "api_key": "apiKey",
        "verify_expectations": "server.verifyAfterUp",
    },
}
"""Per component, the inputs no field of their name feeds: input path → the stack key a
refusal of it names (a secret, a value the target makes from other keys)."""


def _fed_keys() -> dict[str, dict[str, str]]:
    """Each fed input's path → its field's stack key, from `FEEDS`; a nested TypedDict that
    one model feeds → that model's key."""
    keys: dict[str, dict[str, str]] = {component: {} for component in COMPONENT_ARGS}
    nested: dict[tuple[str, str], set[str]] = {}
    for feed in FEEDS:
        table = keys[feed.component]
        if feed.path:
            nested.setdefault((feed.component, feed.path), set()).add(feed.key)
        for name, given in feed.fields().items():
            path = f"{feed.path}.{given}" if feed.path else given
            key = f"{feed.key}.{camel(name)}" if feed.key else camel(name)
            if table.setdefault(path, key) != key:
                raise TypeError(f"{feed.component}.{path}: fed by {table[path]} and {key}")
    for (component, path), (key, *others) in nested.items():
        if not others:
            keys[component].setdefault(path, key)
    return keys


FED_KEYS = _fed_keys()
"""Per component, the input paths the feeds name: input path → its field's stack key."""
STACK_KEYS = {
    component: {**fed, **RENAMED_INPUTS.get(component, {})} for component, fed in FED_KEYS.items()
}
"""Per component, component input path → the stack file's key it is made from."""


def _camel(part: str | int) -> str | int:
    """An input's name as the stack file spells it; a map key (a label) as it is."""
    if isinstance(part, str) and re.fullmatch(r"[a-z][a-z0-9_]*", part):
        return str(camel(part))
    return part


def stack_key(component: str, loc: Location) -> str:
    """The stack-file key of a component input, or the input named with its component."""
    keys = STACK_KEYS.get(component, {})
    for cut in range(len(loc), 0, -1):
        prefix = snake_path(loc[:cut])
        if prefix in keys:
            # The stack file spells its keys in camelCase, below a mapped key too.
            rest = snake_path(tuple(_camel(p) for p in loc[cut:]))
            return keys[prefix] + (rest if rest.startswith("[") or not rest else f".{rest}")
    return f"{component}.{snake_path(loc)}"


def stack_problems(error: ComponentInputError) -> list[str]:
    """A component's refusal as the stack file's `key: problem` lines."""
    return component_problems(error.component, error.problems)


def component_problems(component: str, problems: list[Problem]) -> list[str]:
    """A component rule's problems (run by the stack file before the component exists) as
    the stack file's `key: problem` lines."""

    def key(loc: Location) -> str:
        return stack_key(component, loc)

    return [f"{key(loc)}: {named(message, key)}" for loc, message in problems]
