"""Every component input the stack file feeds is reported under a stack key that exists.

A component that refuses an input raises with the input's path; `infra.config.inputs` turns
it into the stack file's key. The table is checked against the inputs the targets really
build from each stack in `stacks/` and against the stack file's own schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from infra.config import DockerHostStack, KubernetesStack, read_stack_file
from infra.config.feeds import fed
from infra.config.inputs import FED_KEYS, RENAMED_INPUTS, STACK_KEYS, stack_key
from infra.config.schema import explain
from infra.config.secrets import StackSecrets
from infra.targets import docker_host, kubernetes
from infra.targets.registry import stack_plan
from tests.conftest import ROOT, unlocked_source

VOLUME = {"claim_name": "m", "fetcher_config_map": "m-f", "check_image": "i", "run_as_user": 1}
CONSTANTS = {
    ("VllmRocmServer", "flags.host"),
    ("VllmRocmServer", "project_name"),
    ("VllmRocmServer", "fetch_parallel"),
    ("LlamaCppVulkanServer", "gpu_device_path"),
    ("LlamaCppRpcWorker", "gpu_device_path"),
    ("LlamaCppRpcWorker", "head_pod_labels"),
}
"""Inputs no stack key sets: a constant of the target, a value it derives (the head's pod
labels) or the component's own default (a refusal of one is our bug, not the stack file's)."""


def leaves(value: Any, loc: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from leaves(child, (*loc, key))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for index, child in enumerate(value):
            yield from leaves(child, (*loc, index))
    else:
        yield loc


def read_stack(name: str) -> KubernetesStack | DockerHostStack:
    stack = read_stack_file(ROOT / "stacks" / f"Pulumi.{name}.yaml").stack()
    assert isinstance(stack, KubernetesStack | DockerHostStack)
    return stack


def built_inputs(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    stack = read_stack(name)
    source = unlocked_source(stack)
    if isinstance(stack, DockerHostStack):
        secrets = StackSecrets.model_construct(hf_token=None, api_key="k", ssh_private_key="k")
        args = dict(docker_host.server_args(stack, source, secrets))
        args.update(verify_expectations="{}")
        yield "VllmRocmServer", args
        return
    assert isinstance(stack, KubernetesStack)
    split, given = stack_plan(stack, source).tensor_split, fed(stack)
    server = dict(kubernetes.server_args(stack, given, source, VOLUME, split))  # type: ignore[arg-type]
    server.update(api_key="k", verify_expectations="{}", stop_before_model_change=True)
    yield "LlamaCppVulkanServer", server
    yield "GgufModelStore", dict(kubernetes.store_args(stack, given, source, "token"))
    for worker in kubernetes.rpc_worker_args(stack, given).values():
        yield "LlamaCppRpcWorker", dict(worker)


def without_indices(key: str) -> str:
    """`model.files[0].name` → `model.files`: what `explain` knows of a key."""
    return re.sub(r"\[\d+\].*$", "", key)


@pytest.mark.parametrize("stack", ["strix-halo", "strix-halo-pair-split", "mi300x"])
def test_every_input_a_stack_feeds_maps_to_a_key_of_that_stack_file(stack: str) -> None:
    unmapped, unknown = [], []
    for component, args in built_inputs(stack):
        for loc in leaves(args):
            path = ".".join(str(p) for p in loc)
            if any(
                component == owner and (path == prefix or path.startswith(f"{prefix}."))
                for owner, prefix in CONSTANTS
            ):
                continue
            key = stack_key(component, loc)
            if key.startswith(f"{component}."):
                unmapped.append(key)
                continue
            checked = without_indices(key)
            # A dict-valued key (nodeSelector, monitorLabels) has no schema entry per map key.
            while checked and not explain(checked):
                checked = checked.rpartition(".")[0]
                if checked and explain(checked) and "object" not in explain(checked)[0]:
                    unknown.append(key)
                    break
            if not checked:
                unknown.append(key)
    assert unmapped == []
    assert unknown == []


def test_every_key_of_the_table_is_a_stack_file_key() -> None:
    keys = {value for table in STACK_KEYS.values() for value in table.values()}
    assert [key for key in sorted(keys) if not explain(key)] == []


def test_a_refusal_below_a_mapped_input_is_named_in_the_stack_files_spelling() -> None:
    loc = ("probes", "startup", "failure_threshold")
    assert stack_key("LlamaCppVulkanServer", loc) == "server.probes.startup.failureThreshold"
    loc2 = ("flags", "speculative_config", "num_speculative_tokens")
    assert stack_key("VllmRocmServer", loc2) == "server.speculative.numSpeculativeTokens"


def test_explain_of_a_secret_key_describes_it() -> None:
    lines = explain("apiKey")
    assert lines and "encrypted" in "\n".join(lines)


def test_the_renamed_inputs_hold_only_what_no_field_of_their_name_feeds() -> None:
    """The explicit table is the deliberate renames: an entry the feeds already give is a copy."""
    repeated = [
        f"{component}.{path}"
        for component, renamed in RENAMED_INPUTS.items()
        for path, key in renamed.items()
        if FED_KEYS[component].get(path) == key
    ]
    assert repeated == []


def at(value: Any, path: str) -> Any:
    """The value at a dotted path of attributes or keys; None where a part is absent."""
    for part in path.split(".") if path else ():
        value = getattr(value, part, None) if isinstance(value, BaseModel) else value.get(part)
        if value is None:
            return None
    return value


@pytest.mark.parametrize("stack", ["strix-halo", "strix-halo-pair-split", "mi300x"])
def test_every_field_a_stack_feeds_as_it_is_reaches_its_input_unchanged(stack: str) -> None:
    """The targets compute only what no field gives: each given field's value is the input's;
    a list of settings gives each item its own (a worker each, a client each), in order."""
    built = list(built_inputs(stack))
    changed, checked = [], 0
    for (component, path), given in fed(read_stack(stack)).items():
        places = [at(args, path) for name, args in built if name == component]
        inputs = places[0] if len(places) == 1 else places
        rows = given if isinstance(given, list) else [given]
        # The clients' input has the CIDRs after them: strict=False.
        for row, place in zip(rows, inputs if isinstance(inputs, list) else [inputs], strict=False):
            if not isinstance(place, dict):
                continue
            for name, value in row.items():
                checked += 1
                if place.get(name) != value:
                    changed.append(f"{component}.{path}.{name}: {place.get(name)!r}")
    assert checked > 20
    assert changed == []
