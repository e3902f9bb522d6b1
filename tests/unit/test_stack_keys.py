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

from infra.config import DockerHostStack, KubernetesStack, read_stack_file
from infra.config.inputs import STACK_KEYS, stack_key
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


def built_inputs(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    stack = read_stack_file(ROOT / "stacks" / f"Pulumi.{name}.yaml").stack()
    source = unlocked_source(stack)
    if isinstance(stack, DockerHostStack):
        secrets = StackSecrets.model_construct(hf_token=None, api_key="k", ssh_private_key="k")
        args = dict(docker_host.server_args(stack, source, secrets))
        args.update(min_decode_tps=1.0, verify_expectations="{}")
        yield "VllmRocmServer", args
        return
    assert isinstance(stack, KubernetesStack)
    split = stack_plan(stack, source).tensor_split
    server = dict(kubernetes.server_args(stack, source, VOLUME, split))  # type: ignore[arg-type]
    server.update(api_key="k", verify_expectations="{}", stop_before_model_change=True)
    yield "LlamaCppVulkanServer", server
    yield "GgufModelStore", dict(kubernetes.store_args(stack, source, "token"))
    for worker in kubernetes.rpc_worker_args(stack).values():
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
