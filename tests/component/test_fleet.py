"""Several servers in one stack, and one model split across nodes: render, plan and bad input."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.llamacpp.inputs import DEFAULT_IMAGE
from components.llamacpp.manifests import head_pod_labels, server_labels
from infra.config import ConfigError, FleetStack, KubernetesStack, parse_stack
from infra.config.feeds import fed
from infra.lock import model_source
from infra.plan.llamacpp import device_layers, plan_llamacpp, rpc_tensor_split, split_layers
from infra.plan.stack import llamacpp_inputs, probe_problems
from infra.targets.registry import stack_plan
from tests.conftest import ROOT, STACKS, stack_values
from tests.support.cli import run_cli
from tests.support.render import render

PAIR, SPLIT = "strix-halo-pair", "strix-halo-pair-split"
HEAD = "deepseek-v4-flash-0731"


def documents(out: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((out / "manifests.yaml").read_text()) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def rendered(tmp_path_factory: pytest.TempPathFactory, stack: str) -> Path:
    out = tmp_path_factory.mktemp("fleet") / stack
    result = render(stack, out)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory, PAIR)


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rendered(tmp_path_factory, SPLIT)


def test_each_server_of_a_fleet_gets_its_own_node_volume_and_fetch(pair: Path) -> None:
    docs = documents(pair)
    deployments = of_kind(docs, "Deployment")
    assert set(deployments) == {"deepseek-v4-flash-0731", "deepseek-v4-flash-0731-b"}
    nodes = {
        name: d["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        for name, d in deployments.items()
    }
    assert nodes == {"deepseek-v4-flash-0731": "nucbox-1", "deepseek-v4-flash-0731-b": "nucbox-2"}
    claims = {
        name: next(v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "models")
        for name, d in deployments.items()
    }
    assert {c["persistentVolumeClaim"]["claimName"] for c in claims.values()} == {
        "models-nucbox-1",
        "models-nucbox-2",
    }
    assert set(of_kind(docs, "PersistentVolumeClaim")) == {"models-nucbox-1", "models-nucbox-2"}
    # Each fetch Job runs on its server's node (local-path volumes are node-bound).
    jobs = of_kind(docs, "Job")
    job_nodes = sorted(
        j["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        for j in jobs.values()
    )
    assert job_nodes == ["nucbox-1", "nucbox-2"]


def test_fleet_model_list_has_an_entry_per_server_in_the_output_and_the_configmap(
    pair: Path,
) -> None:
    outputs = json.loads((pair / "outputs.json").read_text())
    model_list = outputs["litellmModelList"]
    assert [e["model_name"] for e in model_list] == ["deepseek-v4-flash-0731"] * 2
    assert [e["litellm_params"]["api_base"] for e in model_list] == [
        "http://deepseek-v4-flash-0731.llm.svc:8080/v1",
        "http://deepseek-v4-flash-0731-b.llm.svc:8080/v1",
    ]
    assert set(outputs["servers"]) == {"deepseek-v4-flash-0731", "deepseek-v4-flash-0731-b"}
    assert outputs["servers"]["deepseek-v4-flash-0731-b"]["url"] == (
        "http://deepseek-v4-flash-0731-b.llm.svc:8080"
    )
    (config_map,) = [
        d for d in documents(pair) if d["kind"] == "ConfigMap" and "litellm/route" in
        d["metadata"].get("labels", {})
    ]  # fmt: skip
    assert yaml.safe_load(config_map["data"]["model_list.yaml"]) == model_list
    assert outputs["plan"]["fits"] is True
    assert {"vram:deepseek-v4-flash-0731", "vram:deepseek-v4-flash-0731-b"} <= set(
        outputs["plan"]["devices"]
    )


def test_split_model_runs_a_pinned_rpc_server_on_the_worker_node(split: Path) -> None:
    docs = documents(split)
    deployments = of_kind(docs, "Deployment")
    worker = deployments["deepseek-v4-flash-0731-rpc-0"]
    pod = worker["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "nucbox-2"}
    (container,) = pod["containers"]
    assert container["command"] == ["/app/ggml-rpc-server", "-H", "0.0.0.0", "-p", "50052"]
    assert container["image"] == "registry.lan/llama.cpp:vulkan-rpc-b11434"
    # The same GPU access as the server: privileged with the node's /dev/dri.
    assert container["securityContext"]["privileged"] is True
    assert {"name": "dev-dri", "mountPath": "/dev/dri"} in container["volumeMounts"]
    assert worker["spec"]["strategy"] == {"type": "Recreate"}
    service = of_kind(docs, "Service")["deepseek-v4-flash-0731-rpc-0"]
    assert service["spec"]["ports"] == [
        {"name": "rpc", "port": 50052, "targetPort": "rpc", "protocol": "TCP"}
    ]


def test_worker_policy_admits_only_the_heads_pods_and_the_api_service_never_selects_it(
    split: Path,
) -> None:
    docs = documents(split)
    policy = of_kind(docs, "NetworkPolicy")["deepseek-v4-flash-0731-rpc-0-ingress"]
    worker_labels = of_kind(docs, "Deployment")["deepseek-v4-flash-0731-rpc-0"]["spec"]["template"][
        "metadata"
    ]["labels"]
    head = of_kind(docs, "Deployment")["deepseek-v4-flash-0731"]
    head_labels = head["spec"]["template"]["metadata"]["labels"]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == []
    assert all(worker_labels[k] == v for k, v in spec["podSelector"]["matchLabels"].items())
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": 50052, "protocol": "TCP"}]
    # One peer: the head's pods in this namespace (no namespaceSelector, no ipBlock).
    # The head Deployment's pods only: a label the verify Job's pods do not carry.
    assert rule["from"] == [{"podSelector": {"matchLabels": head_pod_labels(HEAD)}}]
    assert not set(head_pod_labels(HEAD).items()) <= set(server_labels(HEAD).items())
    assert all(
        head_labels[k] == v for k, v in rule["from"][0]["podSelector"]["matchLabels"].items()
    )
    api = of_kind(docs, "Service")["deepseek-v4-flash-0731"]["spec"]["selector"]
    assert not all(worker_labels.get(k) == v for k, v in api.items())


def test_head_argv_carries_the_workers_and_the_plans_tensor_split(split: Path) -> None:
    head = of_kind(documents(split), "Deployment")["deepseek-v4-flash-0731"]
    container = head["spec"]["template"]["spec"]["containers"][0]
    argv = container["args"]
    assert argv[argv.index("--rpc") + 1] == "deepseek-v4-flash-0731-rpc-0.llm.svc:50052"
    stack = parse_stack(stack_values(SPLIT))
    assert isinstance(stack, KubernetesStack)
    source = model_source(stack.model, ROOT / "stacks" / "no-such.lock.json", preview=True)
    split_shares = rpc_tensor_split(llamacpp_inputs(stack, source))
    assert argv[argv.index("--tensor-split") + 1] == ",".join(f"{s:g}" for s in split_shares)
    # The GPU gate also wants a model buffer on the worker.
    probe = " ".join(container["startupProbe"]["exec"]["command"])
    assert "deepseek-v4-flash-0731-rpc-0.llm.svc:50052" in probe


@pytest.mark.parametrize(("stack", "servers"), [(SPLIT, 1), (PAIR, 2), ("strix-halo", 1)])
def test_the_program_plans_each_server_once_and_the_target_deploys_that_plan(
    stack: str, servers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra import program
    from infra.config import read_stack_file
    from infra.plan import stack as plan_stack
    from infra.render import run_program

    calls = {"inputs": 0, "structure": 0, "placement": 0}

    def counted(name: str, function: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(
        plan_stack, "llamacpp_inputs", counted("inputs", plan_stack.llamacpp_inputs)
    )
    monkeypatch.setattr(
        plan_stack, "model_structure", counted("structure", plan_stack.model_structure)
    )
    placement = counted("placement", plan_llamacpp)
    monkeypatch.setattr(plan_stack, "plan_llamacpp", placement)
    stack_file = read_stack_file(STACKS / f"Pulumi.{stack}.yaml")
    rendered = run_program(program.main, stack_file.config, stack_file.secret_keys, stack=stack)
    # The split model's load estimate and its --tensor-split come from that one plan too.
    assert calls == {"inputs": servers, "structure": servers, "placement": servers}
    assert rendered.outputs["plan"]["fits"] is True


def test_a_split_models_server_takes_its_tensor_split_from_the_plan_and_only_from_it() -> None:
    from infra.targets.kubernetes import server_args

    stack = parse_stack(stack_values(SPLIT))
    assert isinstance(stack, KubernetesStack)
    source = model_source(stack.model, STACKS / "no-such.lock.json", preview=True)
    volume: Any = {"claim_name": "m", "fetcher_config_map": "f", "check_image": "i"}
    plan = stack_plan(stack, source)
    assert plan.tensor_split is not None and len(plan.tensor_split) == 2
    args = server_args(stack, fed(stack), source, volume, plan.tensor_split)
    assert args["flags"]["tensor_split"] == list(plan.tensor_split)
    with pytest.raises(ValueError, match="tensor split"):
        server_args(stack, fed(stack), source, volume)


def test_split_plan_places_weights_kv_and_compute_per_device(split: Path) -> None:
    plan = json.loads((split / "outputs.json").read_text())["plan"]
    worker = plan["devices"]["vram:deepseek-v4-flash-0731-rpc-0"]
    head = plan["devices"]["vram"]
    for device in (worker, head):
        assert device["items"]["weights"] > 0 and device["items"]["kv_cache"] > 0
        assert device["used_gib"] <= device["capacity_gib"]
    assert plan["network_load_gib"] == {"deepseek-v4-flash-0731-rpc-0": worker["items"]["weights"]}
    total = (
        worker["items"]["weights"]
        + head["items"]["weights"]
        + plan["devices"]["ram"]["items"]["weights"]
    )
    assert total == pytest.approx(135, abs=0.01)


def test_split_layers_follow_llama_cpp_split_points() -> None:
    # 4 layers + output, -ngl 5, two equal devices: upper_bound over the points 0.5, 1.0.
    assert split_layers(4, 5, (1.0, 1.0)) == [0, 0, 0, 1, 1]
    # -ngl 3 keeps layers 0-1 on the CPU; the output layer is the last device's.
    assert split_layers(4, 3, (1.0, 1.0)) == [None, None, 0, 0, 1]
    assert split_layers(4, 5, (3.0, 1.0)) == [0, 0, 0, 0, 1]


def split_values(**worker: Any) -> dict[str, Any]:
    values = copy.deepcopy(stack_values(SPLIT))
    values["server"]["rpc"]["workers"][0].update(worker)
    return values


def test_a_split_that_does_not_fit_is_refused_with_the_numbers_per_node() -> None:
    stack = parse_stack(split_values(vramGib=40))
    source = model_source(stack.model, ROOT / "no-such.lock.json", preview=True)  # type: ignore[union-attr]
    plan = stack_plan(stack, source)
    # 135 GiB cannot go into 40 + 90 GiB: the worker's share (38 of 126) and the head's rest
    # both overflow, and each line says so with its own numbers.
    worker, head = plan.problems
    assert worker.startswith(
        "plan: does not fit in the VRAM of rpc worker deepseek-v4-flash-0731-rpc-0"
    )
    assert "needed of 40 GiB" in worker and "server.rpc.workers[0].vramGib" in worker
    assert "--tensor-split 38,88" in worker
    assert head.startswith("plan: does not fit in VRAM: ") and "needed of 90 GiB" in head


def run_render(tmp_path: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": {f"llm-infra:{k}": v for k, v in values.items()}}))
    return run_cli(["render", str(path), "--out", str(tmp_path / "out")], cwd=ROOT)


def fleet_split_values() -> dict[str, Any]:
    """The pair stack with its second server split across a third node."""
    values = copy.deepcopy(stack_values(PAIR))
    second = values["servers"][1]
    second["image"] = "registry.lan/llama.cpp:vulkan-rpc-b11434"
    second["rpc"] = {"workers": [{"nodeSelector": {"kubernetes.io/hostname": "nucbox-3"},
                                  "vramGib": 90}]}  # fmt: skip
    return values


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            lambda v: v["servers"][1]["rpc"]["workers"][0].update(vramGib=-1),
            "servers[1].rpc.workers[0].vramGib: -1: Input should be greater than 0",
        ),
        (
            lambda v: v["servers"][1]["rpc"]["workers"][0].update(
                nodeSelector={"kubernetes.io/hostname": "nucbox-1"}
            ),
            "servers[1].rpc.workers[0].nodeSelector: node 'nucbox-1' is already the node of "
            "servers[0]",
        ),
        (
            lambda v: v["servers"][1].update(name="deepseek-v4-flash-0731"),
            "servers[1].name: 'deepseek-v4-flash-0731' is already the name of servers[0].name",
        ),
        (
            lambda v: v["servers"][1]["store"].update(name="models-nucbox-1"),
            "servers[1].store.name: 'models-nucbox-1' is already servers[0]'s volume",
        ),
        (
            lambda v: v["servers"][1].update(gpuLayers=45),
            "servers[1].gpuLayers: 45 is more than the model's 43 layers",
        ),
        (
            lambda v: v["servers"][1].update(image=DEFAULT_IMAGE),
            "servers[1].image: 'ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434' is built "
            "without -DGGML_RPC",
        ),
        (
            lambda v: v["servers"][1]["model"].update(files=[
                f"UD-Q2_K_XL/DeepSeek-V4-Flash-0731-UD-Q2_K_XL-0000{i}-of-00003.gguf"
                for i in (1, 2, 3)
            ]),
            "servers[1].model: servers[0] serves alias 'deepseek-v4-flash-0731' with another",
        ),
        (
            lambda v: v.update(server={"alias": "x"}),
            "server: set inside each entry of servers:",
        ),
    ],
    ids=["negative worker vram", "worker on the head's node", "duplicate server name",
         "shared volume", "entry gpuLayers", "stock image with rpc", "replica with another model",
         "servers and server"],
)  # fmt: skip
def test_bad_fleet_input_exits_2_naming_the_entry(tmp_path: Path, edit: Any, line: str) -> None:
    values = fleet_split_values()
    edit(values)
    result = run_render(tmp_path, values)
    assert result.returncode == 2, result.stdout + result.stderr
    problems = result.stderr.splitlines()[1:]
    assert any(problem.startswith(line) for problem in problems), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_fleet_with_a_split_server_renders_and_plans_every_device(tmp_path: Path) -> None:
    values = fleet_split_values()
    result = run_render(tmp_path, values)
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "out" / "outputs.json").read_text())["plan"]
    assert set(plan["devices"]) == {
        "vram:deepseek-v4-flash-0731", "ram:deepseek-v4-flash-0731",
        "disk:deepseek-v4-flash-0731", "vram:deepseek-v4-flash-0731-b",
        "ram:deepseek-v4-flash-0731-b", "disk:deepseek-v4-flash-0731-b",
        "vram:deepseek-v4-flash-0731-b-rpc-0",
    }  # fmt: skip


def test_a_single_server_stack_is_not_a_fleet() -> None:
    assert isinstance(parse_stack(stack_values("strix-halo")), KubernetesStack)
    assert isinstance(parse_stack(stack_values(PAIR)), FleetStack)
    with pytest.raises(ConfigError):
        parse_stack({**stack_values(PAIR), "servers": []})


def test_device_layers_cover_every_layer_once() -> None:
    stack = parse_stack(stack_values(SPLIT))
    assert isinstance(stack, KubernetesStack)
    source = model_source(stack.model, STACKS / "no-such.lock.json", preview=True)
    held = device_layers(llamacpp_inputs(stack, source))
    every = sorted(il for layers in held.values() for il in layers)
    assert every == list(range(44))


def test_the_startup_probe_must_allow_for_sending_the_workers_their_weights() -> None:
    values = copy.deepcopy(stack_values(SPLIT))
    stack = parse_stack(values)
    assert isinstance(stack, KubernetesStack)
    source = model_source(stack.model, STACKS / "no-such.lock.json", preview=True)
    assert probe_problems(stack, llamacpp_inputs(stack, source)) == []
    # 69 GiB to the worker over a 100 Mbit/s link takes ~1.7 h: more than the probe allows.
    values["server"]["rpc"]["networkMibps"] = 12
    slow = parse_stack(values)
    assert isinstance(slow, KubernetesStack)
    (problem,) = probe_problems(slow, llamacpp_inputs(slow, source))
    assert problem.startswith("server.probes.startup: allows 1800s")
    assert "server.rpc.networkMibps 12" in problem


def test_servers_of_one_model_share_the_stack_lock_and_another_model_gets_its_own() -> None:
    values = fleet_split_values()
    values["servers"][1]["model"]["files"] = [
        f"UD-Q2_K_XL/DeepSeek-V4-Flash-0731-UD-Q2_K_XL-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    values["servers"][1]["alias"] = "deepseek-v4-flash-0731-q2"
    third = copy.deepcopy(values["servers"][1])
    third.update(name="q2-b", nodeSelector={"kubernetes.io/hostname": "nucbox-5"}, rpc=None)
    third["store"]["name"] = "models-q2-b"
    third["image"] = values["servers"][0].get("image", DEFAULT_IMAGE)
    values["servers"].append(third)
    fleet = parse_stack(values)
    assert isinstance(fleet, FleetStack)
    lock = STACKS / "pair.lock.json"
    assert fleet.lock_paths(lock) == [
        lock,
        STACKS / "pair.deepseek-v4-flash-0731-b.lock.json",
        STACKS / "pair.deepseek-v4-flash-0731-b.lock.json",
    ]


def test_a_stack_wide_problem_of_a_fleet_is_said_once() -> None:
    values = copy.deepcopy(stack_values(PAIR))
    values["network"] = {"allowCidrs": ["0.0.0.0/0"]}
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    assert [p.split(":")[0] for p in caught.value.problems] == ["network.allowCidrs"]


def test_each_server_of_a_fleet_has_its_own_dashboard_and_scrape_job(pair: Path) -> None:
    boards = {
        name: json.loads(next(iter(d["data"].values())))
        for name, d in of_kind(documents(pair), "ConfigMap").items()
        if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    }
    assert set(boards) == {"deepseek-v4-flash-0731-dashboard", "deepseek-v4-flash-0731-b-dashboard"}
    # Distinct titles and uids (one Grafana folder holds both), each reading its own job.
    assert (
        len({b["title"] for b in boards.values()}) == len({b["uid"] for b in boards.values()}) == 2
    )
    for name, board in boards.items():
        job = name.removesuffix("-dashboard")
        exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        assert exprs and all(f'job="{job}"' in e for e in exprs if "job=" in e), name
