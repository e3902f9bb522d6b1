"""Kubernetes NetworkPolicy ingress semantics, evaluated: may this source reach this pod's port?

What the rendered policies use, as the NetworkPolicy API defines it: a policy selects pods of its
namespace by `podSelector.matchLabels`; a pod selected by no Ingress policy accepts everything; a
selected pod accepts a connection when some rule of some selecting policy lists the port (or no
ports) and a peer that matches: `namespaceSelector` (+ `podSelector`: both must match),
`podSelector` alone (the policy's own namespace), or `ipBlock` (the address in `cidr`, not in an
`except`). Anything else a policy could hold (matchExpressions, named ports, endPort) fails the
evaluation, so a render that starts using it is noticed here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

NAMESPACE_NAME = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Source:
    """Where a connection comes from: a pod (namespace and labels) or a bare address."""

    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    ip: str | None = None


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    unknown = set(selector) - {"matchLabels"}
    assert not unknown, f"selector fields this evaluator does not model: {unknown}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_admits(peer: dict[str, Any], policy_namespace: str, source: Source) -> bool:
    unknown = set(peer) - {"namespaceSelector", "podSelector", "ipBlock"}
    assert not unknown, f"peer fields this evaluator does not model: {unknown}"
    if "ipBlock" in peer:
        if source.ip is None:
            return False
        address = ipaddress.ip_address(source.ip)
        block = peer["ipBlock"]
        inside = address in ipaddress.ip_network(block["cidr"])
        return inside and not any(
            address in ipaddress.ip_network(c) for c in block.get("except", [])
        )
    if source.namespace is None:
        return False
    if "namespaceSelector" in peer:
        namespace_labels = {NAMESPACE_NAME: source.namespace}
        if not _matches(peer["namespaceSelector"], namespace_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return _matches(peer.get("podSelector", {}), source.labels)


def _port_listed(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        assert isinstance(entry.get("port"), int) and "endPort" not in entry, entry
        if entry["port"] == port and entry.get("protocol", "TCP") == protocol:
            return True
    return False


def admits(
    policies: list[dict[str, Any]],
    namespace: str,
    pod_labels: dict[str, str],
    source: Source,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether a connection from `source` to `port` of a pod (`namespace`, `pod_labels`) is let
    in by `policies` (every NetworkPolicy of the render)."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _matches(p["spec"]["podSelector"], pod_labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            if not _port_listed(rule.get("ports"), port, protocol):
                continue
            peers = rule.get("from")
            if not peers or any(_peer_admits(p, namespace, source) for p in peers):
                return True
    return False
