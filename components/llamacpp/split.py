"""The rules between a split model's head (LlamaCppVulkanServer) and its RPC workers.

They span components, so neither constructor can check them alone: the stack file's target
calls `split_problems` before it creates the workers and the head, and a Python program that
builds them itself calls it the same way (it raises nothing; it returns the problems).
"""

from collections.abc import Mapping
from typing import Any

from components.llamacpp.inputs import LlamaCppRpcWorkerArgs, LlamaCppVulkanServerArgs
from components.llamacpp.manifests import head_pod_labels
from components.llamacpp.rpc_manifests import rpc_endpoint
from components.validation import ComponentInputError, Problem, with_defaults


def split_problems(
    head: str,
    server: LlamaCppVulkanServerArgs,
    workers: Mapping[str, LlamaCppRpcWorkerArgs],
) -> list[Problem]:
    """What keeps `head` from using exactly these workers, located at the head's or a
    worker's inputs (`workers.<name>.head_pod_labels`)."""
    problems: list[Problem] = []
    # The labels only the head Deployment's pods carry (its role among them).
    pods = head_pod_labels(head)
    namespace = server["namespace"]
    expected = []
    for name, worker in workers.items():
        if worker["head"] != head:
            problems.append(((name, "head"), f"{worker['head']!r} is not the head {head!r}"))
        labels: Mapping[str, Any] = worker["head_pod_labels"]
        if any(pods.get(key) != value for key, value in labels.items()):
            problems.append(
                (
                    (name, "head_pod_labels"),
                    f"{dict(labels)} does not select the head's pods {pods}: the worker's "
                    "NetworkPolicy would shut the head out",
                )
            )
        if isinstance(namespace, str) and worker["namespace"] == namespace:
            # The workers' args as given (not yet checked): their defaults filled here.
            port = with_defaults(worker, LlamaCppRpcWorkerArgs)["port"]
            expected.append(rpc_endpoint(name, namespace, port))
    listed = list(server["flags"].get("rpc") or [])
    if isinstance(namespace, str) and len(expected) == len(workers) and listed != expected:
        problems.append(
            (("flags", "rpc"), f"{listed} is not the workers' Services in order: {expected}")
        )
    split = server["flags"].get("tensor_split")
    # One share per device: each worker's, then the head's own GPU when it has one.
    if split is not None and len(split) not in (len(workers), len(workers) + 1):
        problems.append(
            (
                ("flags", "tensor_split"),
                f"has {len(split)} shares for {len(workers)} workers (one more with the head's "
                "own GPU)",
            )
        )
    return problems


def check_split(
    head: str,
    server: LlamaCppVulkanServerArgs,
    workers: Mapping[str, LlamaCppRpcWorkerArgs],
) -> None:
    """Raise ComponentInputError (for the head) when `split_problems` finds any."""
    problems = split_problems(head, server, workers)
    if problems:
        raise ComponentInputError("LlamaCppVulkanServer", head, problems)
