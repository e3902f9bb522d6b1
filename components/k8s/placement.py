"""One rule for nodes: every server and RPC worker on a node of its own.

A node is named by whichever label identifies it (`kubernetes.io/hostname`, or k3s's
`k3s.io/hostname`: k3s sets both to the host name). In a stack of more than one server or
worker each nodeSelector must name a node, and no two the same one; the pods also carry a
podAntiAffinity on `kubernetes.io/hostname` (components/llamacpp/manifests.py), since
selectors alone cannot prove two pods land apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

NODE_LABELS = ("kubernetes.io/hostname", "k3s.io/hostname")
"""Labels whose value is the node's name."""


def placement_problems(pods: Sequence[tuple[str, Mapping[str, str]]]) -> list[tuple[int, str]]:
    """Problems of (owner, nodeSelector) for every server and worker of one program or stack,
    as (index into `pods`, message); none for one pod. Each door names the owners its way."""
    if len(pods) < 2:
        return []
    problems = []
    nodes: dict[str, str] = {}
    for index, (owner, selector) in enumerate(pods):
        named = {selector[label] for label in NODE_LABELS if label in selector}
        if not named:
            problems.append(
                (
                    index,
                    f"{dict(selector)} names no node: with more than one server or worker each "
                    "is pinned to a node of its own by kubernetes.io/hostname (or "
                    "k3s.io/hostname)",
                )
            )
            continue
        if len(named) > 1:
            problems.append(
                (
                    index,
                    "kubernetes.io/hostname and k3s.io/hostname name different nodes "
                    f"({', '.join(sorted(named))}); both are the node's host name",
                )
            )
            continue
        node = named.pop()
        if node in nodes:
            problems.append(
                (
                    index,
                    f"node {node!r} is already the node of {nodes[node]} (one GPU per node: "
                    "each server and worker needs its own node)",
                )
            )
        else:
            nodes[node] = owner
    return problems
