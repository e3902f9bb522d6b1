"""NetworkPolicies: the server admits only its clients; the fetch Job reaches only DNS and HTTPS."""

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from components.grammars import Cidr, DnsLabel, LabelKey, LabelValue
from components.validation import Problem, cross_field_rule, documented


@documented
class NetworkClient(TypedDict):
    """Pods allowed to reach a server: a namespace, optionally narrowed by pod labels."""

    namespace: NotRequired[DnsLabel]
    """Namespace of the clients (e.g. `litellm`)."""
    pod_labels: NotRequired[dict[LabelKey, LabelValue]]
    """Labels the client pods must carry; all pods of the namespace when empty."""
    cidr: NotRequired[Cidr]
    """Instead of a namespace: a network (ipBlock), such as a node's address."""


@cross_field_rule(NetworkClient)
def _one_kind_of_client(client: Mapping[str, Any]) -> list[Problem]:
    if ("namespace" in client) == ("cidr" in client):
        return [((), "names either a namespace (with optional pod_labels) or a cidr, not both")]
    if "cidr" in client and "pod_labels" in client:
        return [(("pod_labels",), "selects pods of a namespace: it does not go with a cidr")]
    return []


def ingress_policy(
    name: str,
    namespace: str,
    labels: dict[str, str],
    pod_selector: dict[str, str],
    port: int,
    clients: list[NetworkClient],
) -> dict[str, Any]:
    """Admit traffic to the selected pods on one port, from the listed clients only."""
    peers = []
    for client in clients:
        if "cidr" in client:
            peers.append({"ipBlock": {"cidr": client["cidr"]}})
            continue
        peer: dict[str, Any] = {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": client["namespace"]}
            }
        }
        if client.get("pod_labels"):
            peer["podSelector"] = {"matchLabels": client["pod_labels"]}
        peers.append(peer)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "podSelector": {"matchLabels": pod_selector},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"port": port, "protocol": "TCP"}]}]
            if peers
            else [],
        },
    }


def egress_policy(
    name: str,
    namespace: str,
    labels: dict[str, str],
    pod_selector: dict[str, str],
    ports: list[int],
) -> dict[str, Any]:
    """Let the selected pods reach DNS and the given TCP ports (HTTPS), and nothing else."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "podSelector": {"matchLabels": pod_selector},
            "policyTypes": ["Egress", "Ingress"],
            "ingress": [],
            "egress": [
                {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
                {"ports": [{"port": port, "protocol": "TCP"} for port in sorted(set(ports))]},
            ],
        },
    }
