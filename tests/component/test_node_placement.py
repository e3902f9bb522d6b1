"""One rule for nodes: servers and RPC workers on distinct nodes, whichever label names them;
the pods also keep apart by podAntiAffinity; a worker admits only the head Deployment's pods."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from components.k8s.metadata import Meta
from components.k8s.verify_job import verify_job
from components.llamacpp.manifests import ROLE_LABEL, head_pod_labels, server_labels
from components.llamacpp.rpc_manifests import worker_policy
from infra import program
from infra.config import ConfigError, parse_stack
from infra.render import run_program
from tests.conftest import stack_values

PAIR, SPLIT = "strix-halo-pair", "strix-halo-pair-split"
HEAD = "deepseek-v4-flash-0731"


def problems(values: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    return caught.value.problems


def program_problems(values: dict[str, Any]) -> list[str]:
    """The problems of the stack's program (the components' own rules, in the stack's keys)."""
    config = {
        f"llm-infra:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()
    }
    with pytest.raises(ConfigError) as caught:
        run_program(program.main, config, [], stack=SPLIT)
    return caught.value.problems


def split(**worker: Any) -> dict[str, Any]:
    values = copy.deepcopy(stack_values(SPLIT))
    values["server"]["rpc"]["workers"][0].update(worker)
    return values


def test_the_stacks_as_written_place_each_pod_on_its_own_node() -> None:
    for stack in (SPLIT, PAIR, "strix-halo"):
        parse_stack(copy.deepcopy(stack_values(stack)))


def test_two_workers_on_one_node_are_refused() -> None:
    values = split()
    workers = values["server"]["rpc"]["workers"]
    workers.append({**copy.deepcopy(workers[0]), "name": "second-worker"})
    assert (
        "server.rpc.workers[1].nodeSelector: node 'nucbox-2' is already the node of "
        "server.rpc.workers[0]" in "\n".join(problems(values))
    )


def test_a_worker_on_the_heads_node_through_a_superset_selector_is_refused() -> None:
    values = split(nodeSelector={"kubernetes.io/hostname": "nucbox-1", "gpu": "radeon"})
    assert (
        "server.rpc.workers[0].nodeSelector: node 'nucbox-1' is already the node of server"
        in "\n".join(problems(values))
    )


def test_a_worker_on_the_heads_node_by_the_k3s_label_is_refused() -> None:
    values = split(nodeSelector={"k3s.io/hostname": "nucbox-1"})
    assert "node 'nucbox-1' is already the node of server" in "\n".join(problems(values))


def test_a_head_without_a_node_selector_in_a_split_is_refused() -> None:
    values = split()
    values["server"]["nodeSelector"] = {"hardware": "high-memory"}
    assert "server.nodeSelector: {'hardware': 'high-memory'} names no node" in "\n".join(
        problems(values)
    )


def test_fleet_servers_on_one_node_by_the_k3s_label_are_refused() -> None:
    values = copy.deepcopy(stack_values(PAIR))
    for entry in values["servers"]:
        entry["nodeSelector"] = {"k3s.io/hostname": "nucbox-1"}
    assert (
        "servers[1].nodeSelector: node 'nucbox-1' is already the node of servers[0]"
        in "\n".join(problems(values))
    )


def test_fleet_servers_without_node_selectors_are_refused() -> None:
    values = copy.deepcopy(stack_values(PAIR))
    for entry in values["servers"]:
        entry["nodeSelector"] = {}
    found = "\n".join(problems(values))
    assert "servers[0].nodeSelector: {} names no node" in found
    assert "servers[1].nodeSelector: {} names no node" in found


def test_two_labels_naming_two_nodes_on_one_pod_are_refused() -> None:
    values = split(nodeSelector={"kubernetes.io/hostname": "nucbox-2", "k3s.io/hostname": "b"})
    assert "name different nodes (b, nucbox-2)" in "\n".join(problems(values))


def anti_affinity_terms(pod_spec: dict[str, Any]) -> Any:
    return pod_spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_server_and_worker_pods_repel_each_other_on_a_node(rendered_split: Any) -> None:
    deployments = {d["metadata"]["name"]: d for d in rendered_split if d["kind"] == "Deployment"}
    head, worker = deployments[HEAD], deployments[f"{HEAD}-rpc-0"]
    for deployment in (head, worker):
        pod = deployment["spec"]["template"]
        (term,) = anti_affinity_terms(pod["spec"])
        assert term["topologyKey"] == "kubernetes.io/hostname"
        (expression,) = term["labelSelector"]["matchExpressions"]
        # Each pod matches the term: no two servers or workers share a node.
        assert expression["key"] == ROLE_LABEL and expression["operator"] == "In"
        assert pod["metadata"]["labels"][ROLE_LABEL] in expression["values"]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_worker_policy_admits_the_head_pods_but_not_the_verify_job(
    rendered_split: Any,
) -> None:
    head = next(
        d for d in rendered_split if d["kind"] == "Deployment" and d["metadata"]["name"] == HEAD
    )
    worker = {"app.kubernetes.io/name": "rpc-server", "app.kubernetes.io/instance": "w"}
    policy = worker_policy(Meta("w-ingress", "llm", worker), 50052, head_pod_labels(HEAD))
    admitted = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    job = verify_job(
        Meta(f"{HEAD}-verify-0123abcd", "llm", server_labels(HEAD)), image="python:3.12",
        config_map="cm", url="http://x:8080", api_key_secret=None, run_as_user=1000,
    )  # fmt: skip
    assert matches(admitted, head["spec"]["template"]["metadata"]["labels"])
    assert not matches(admitted, job["spec"]["template"]["metadata"]["labels"])


@pytest.fixture(scope="module")
def rendered_split(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    import yaml

    from tests.support.render import render

    out = tmp_path_factory.mktemp("placement") / SPLIT
    result = render(SPLIT, out)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all((out / "manifests.yaml").read_text()) if d]


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
        "ghcr.io/ggml-org/llama.cpp:server-rocm-b11434",
        "ghcr.io/ggml-org/llama.cpp:full-vulkan-b11434",
        "ghcr.io/ggml-org/llama.cpp@sha256:" + "ab" * 32,
        "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434@sha256:" + "cd" * 32,
    ],
    ids=["vulkan-tag", "rocm-tag", "full-tag", "digest", "tag-and-digest"],
)
def test_the_official_llamacpp_image_is_refused_for_rpc_at_any_tag_or_digest(image: str) -> None:
    values = copy.deepcopy(stack_values(SPLIT))
    values["server"]["image"] = image
    values["server"]["allowFloatingImage"] = True
    found = "\n".join(program_problems(values))
    assert f"server.image: {image!r} is built without -DGGML_RPC" in found


def test_the_official_image_as_the_workers_image_is_refused_too() -> None:
    values = copy.deepcopy(stack_values(SPLIT))
    image = "ghcr.io/ggml-org/llama.cpp@sha256:" + "ab" * 32
    values["server"]["rpc"]["image"] = image
    found = "\n".join(program_problems(values))
    assert f"server.rpc.image: {image!r} is built without -DGGML_RPC" in found
