"""One rule for nodes: every server and RPC worker of a stack on a node of its own.

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


def _owner(key: str) -> str:
    return key.removesuffix(".nodeSelector")


def placement_problems(selectors: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
    """Problems of (key, nodeSelector) for every server and worker of one stack (each key
    ends in `.nodeSelector`); none for a stack of one pod."""
    if len(selectors) < 2:
        return []
    problems = []
    nodes: dict[str, str] = {}
    for key, selector in selectors:
        named = {selector[label] for label in NODE_LABELS if label in selector}
        if not named:
            problems.append(
                f"{key}: {dict(selector)} names no node: with more than one server or worker "
                "in the stack each is pinned to a node of its own by kubernetes.io/hostname "
                "(or k3s.io/hostname)"
            )
            continue
        if len(named) > 1:
            problems.append(
                f"{key}: kubernetes.io/hostname and k3s.io/hostname name different nodes "
                f"({', '.join(sorted(named))}); both are the node's host name"
            )
            continue
        node = named.pop()
        if node in nodes:
            problems.append(
                f"{key}: node {node!r} is already the node of {nodes[node]} (one GPU per "
                "node: each server and worker needs its own node)"
            )
        else:
            nodes[node] = _owner(key)
    return problems
