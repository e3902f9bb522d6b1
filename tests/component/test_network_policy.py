"""Who can reach the server, by the rendered NetworkPolicies evaluated (tests/support/
network_policy.py): exactly the configured namespaces, pod labels and networks, on the API port."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.network_policy import Source, admits
from tests.support.render import render

NETWORK = """  llm-infra:network:
    clients:
      - namespace: litellm
      - namespace: tools
        podLabels: {app: bench}
    allowCidrs: [192.168.1.10/32]
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    work = tmp_path_factory.mktemp("policy")
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    (work / "Pulumi.strix-halo.yaml").write_text(
        text.replace("config:\n", "config:\n" + NETWORK, 1)
    )
    result = render(str(work / "Pulumi.strix-halo.yaml"), work / "out", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all((work / "out" / "manifests.yaml").read_text()))


def server_pod(docs: list[dict[str, Any]]) -> tuple[str, dict[str, str]]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    return deployment["metadata"]["namespace"], deployment["spec"]["template"]["metadata"]["labels"]


CASES = [
    ("any pod of litellm", Source("litellm", {"app": "litellm"}), 8080, True),
    ("a labelled pod of tools", Source("tools", {"app": "bench", "x": "y"}), 8080, True),
    ("another pod of tools", Source("tools", {"app": "other"}), 8080, False),
    ("a pod of the server's own namespace", Source("llm", {"app": "x"}), 8080, False),
    ("k3s's Traefik", Source("kube-system", {"app.kubernetes.io/name": "traefik"}), 8080, False),
    ("the allowed address", Source(ip="192.168.1.10"), 8080, True),
    ("the address next to it", Source(ip="192.168.1.11"), 8080, False),
    ("litellm on another port", Source("litellm", {}), 9999, False),
    ("litellm on the metrics port", Source("litellm", {}), 9464, False),
    ("the monitoring namespace on the metrics port", Source("monitoring", {}), 9464, True),
    ("the monitoring namespace on the API port", Source("monitoring", {}), 8080, False),
]


@pytest.mark.parametrize(("who", "source", "port", "allowed"), CASES, ids=[c[0] for c in CASES])
def test_the_server_admits_exactly_its_configured_clients(
    rendered: list[dict[str, Any]], who: str, source: Source, port: int, allowed: bool
) -> None:
    policies = [d for d in rendered if d["kind"] == "NetworkPolicy"]
    namespace, labels = server_pod(rendered)
    assert admits(policies, namespace, labels, source, port) is allowed, who


def test_an_exposed_server_admits_its_outside_networks_at_the_node_port_only(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("exposed")
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    exposed = NETWORK + "    nodePort: 30080\n"
    (work / "Pulumi.exposed.yaml").write_text(text.replace("config:\n", "config:\n" + exposed, 1))
    result = render(str(work / "Pulumi.exposed.yaml"), work / "out", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all((work / "out" / "manifests.yaml").read_text()))
    namespace, labels = server_pod(docs)
    (service,) = [d for d in docs if d["kind"] == "Service" and d["spec"]["type"] == "NodePort"]
    # The API port alone, on the server's pod, keeping the client's address (no SNAT).
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP", "nodePort": 30080}
    ]
    assert service["spec"]["externalTrafficPolicy"] == "Local"
    assert service["spec"]["selector"].items() <= labels.items()
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert admits(policies, namespace, labels, Source(ip="192.168.1.10"), 8080)
    assert not admits(policies, namespace, labels, Source(ip="203.0.113.7"), 8080)
    assert not admits(policies, namespace, labels, Source(ip="192.168.1.10"), 9464)


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("    nodePort: 30080\n", "network.allowCidrs is empty"),
        ("    nodePort: 30080\n    allowCidrs: [10.0.0.0/8]\n    policies: false\n",
         "with network.policies: false, so every address"),
        ("    nodePort: 80\n    allowCidrs: [10.0.0.0/8]\n", "network.nodePort"),
    ],
)  # fmt: skip
def test_a_node_port_without_networks_to_admit_is_refused(
    tmp_path_factory: pytest.TempPathFactory, network: str, message: str
) -> None:
    work = tmp_path_factory.mktemp("refused")
    text = (ROOT / "stacks" / "Pulumi.strix-halo.yaml").read_text()
    block = "  llm-infra:network:\n" + network
    (work / "Pulumi.x.yaml").write_text(text.replace("config:\n", "config:\n" + block, 1))
    result = render(str(work / "Pulumi.x.yaml"), work / "out", cwd=ROOT)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
