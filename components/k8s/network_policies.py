"""NetworkPolicies: the server admits only its clients; the fetch Job reaches only DNS and HTTPS."""

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from components.grammars import Cidr, DnsLabel, LabelKey, LabelValue
from components.k8s.metadata import Meta, object_head
from components.validation import Problem, cross_field_rule, documented

NETWORK_POLICY_API = "networking.k8s.io/v1"


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


def network_policy(
    meta: Meta,
    pod_selector: dict[str, str],
    policy_types: list[str],
    ingress: list[dict[str, Any]],
    egress: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A NetworkPolicy of the selected pods: these ingress rules, and these egress rules if any."""
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": pod_selector},
        "policyTypes": policy_types,
        "ingress": ingress,
    }
    if egress is not None:
        spec["egress"] = egress
    return {**object_head(NETWORK_POLICY_API, "NetworkPolicy", meta), "spec": spec}


def isolating_policy(meta: Meta, pod_selector: dict[str, str]) -> dict[str, Any]:
    """No traffic in or out of the selected pods."""
    return network_policy(meta, pod_selector, ["Ingress", "Egress"], [], [])


def tcp_port(port: int) -> dict[str, Any]:
    """A NetworkPolicy port entry: this TCP port."""
    return {"port": port, "protocol": "TCP"}


def client_peers(clients: list[NetworkClient]) -> list[dict[str, Any]]:
    """The clients as NetworkPolicy peers: a namespace (and pod labels), or a network."""
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
    return peers


def ingress_rules(port: int, peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ingress rule that admits these peers on one TCP port; none without peers."""
    return [{"from": peers, "ports": [tcp_port(port)]}] if peers else []


def ingress_policy(
    meta: Meta, pod_selector: dict[str, str], port: int, clients: list[NetworkClient]
) -> dict[str, Any]:
    """Admit traffic to the selected pods on one port, from the listed clients only."""
    rules = ingress_rules(port, client_peers(clients))
    return network_policy(meta, pod_selector, ["Ingress"], rules)


def egress_policy(meta: Meta, pod_selector: dict[str, str], ports: list[int]) -> dict[str, Any]:
    """Let the selected pods reach DNS and the given TCP ports (HTTPS), and nothing else."""
    egress = [
        {"ports": [{"port": 53, "protocol": "UDP"}, tcp_port(53)]},
        {"ports": [tcp_port(port) for port in sorted(set(ports))]},
    ]
    return network_policy(meta, pod_selector, ["Egress", "Ingress"], [], egress)
