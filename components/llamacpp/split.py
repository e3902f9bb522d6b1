"""The rules between a split model's head (LlamaCppVulkanServer) and its RPC workers.

They span components, so each constructor checks them against the other side as far as the
program has built it: a head with `--rpc` against the workers already built that name it, a
worker against its head when the head came first (`head_built`, `worker_built`, called by the
constructors before any child exists). The stack file's target also asks `check_split` before
it creates either, so a refused pair leaves no worker behind; a Python program may too.
"""

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi.runtime import settings

from components.k8s.placement import placement_problems
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
    # One GPU per node: the head and each worker on a node of its own.
    placed = [
        (head, server["node_selector"]),
        *((n, w["node_selector"]) for n, w in workers.items()),
    ]
    where: list[tuple[str, ...]] = [("node_selector",), *((n, "node_selector") for n in workers)]
    problems += [(where[index], message) for index, message in placement_problems(placed)]
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


@dataclass
class _Built:
    """The heads and workers one program has built so far."""

    heads: dict[str, LlamaCppVulkanServerArgs] = field(default_factory=dict)
    workers: dict[str, LlamaCppRpcWorkerArgs] = field(default_factory=dict)


_PROGRAMS: "weakref.WeakKeyDictionary[object, _Built]" = weakref.WeakKeyDictionary()
"""Per program run, keyed by its resource monitor (one per engine connection or mock run)."""
_NO_MONITOR = _Built()


def _built() -> _Built:
    monitor = settings.SETTINGS.monitor
    return _NO_MONITOR if monitor is None else _PROGRAMS.setdefault(monitor, _Built())


def head_built(name: str, server: LlamaCppVulkanServerArgs) -> None:
    """A head with `--rpc` and the workers of this program that name it: exactly its list."""
    built = _built()
    built.heads[name] = server
    workers = {n: w for n, w in built.workers.items() if w["head"] == name}
    if workers and server["flags"].get("rpc"):
        check_split(name, server, workers)


def worker_built(name: str, worker: LlamaCppRpcWorkerArgs) -> None:
    """A worker whose head this program built already: it admits the head, the head lists it."""
    built = _built()
    built.workers[name] = worker
    head = built.heads.get(worker["head"])
    if head is None:
        return
    problems = [
        (loc[1:], message)
        for loc, message in split_problems(worker["head"], head, {name: worker})
        if loc[:1] == (name,)
    ]
    namespace = head["namespace"]
    if isinstance(namespace, str) and worker["namespace"] == namespace:
        endpoint = rpc_endpoint(name, namespace, worker["port"])
        listed = list(head["flags"].get("rpc") or [])
        if endpoint not in listed:
            problems.append(
                (
                    ("head",),
                    f"{worker['head']!r} does not list this worker's Service {endpoint} in its "
                    f"flags.rpc {listed}",
                )
            )
    if problems:
        raise ComponentInputError("LlamaCppRpcWorker", name, problems)
