"""Pure builders: argv, container, probes, Deployment, Job, PVC — no Pulumi engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.images import parse_image
from components.k8s.metadata import Meta
from components.k8s.network_policies import egress_policy, ingress_policy
from components.k8s.pod_security import DEFAULT_DRI_DEVICE
from components.llamacpp.flags import FLAGS
from components.llamacpp.inputs import LlamaServerFlags
from components.llamacpp.manifests import (
    llama_server_args,
    probe_window_seconds,
    server_deployment,
    server_labels,
    server_service,
)
from components.model_store.manifests import (
    content_digest,
    fetch_job,
    fetcher_config_map,
    hub_port,
    model_pvc,
    store_names,
)
from components.payloads import FETCHER_SOURCE
from components.payloads.fetcher import fetch_document, lock_digest
from infra.config.feeds import fed
from infra.targets.kubernetes import server_args, store_args
from tests.conftest import MODEL_VOLUME, strix, unlocked_source

# The server these tests build: its name, namespace and labels.
DS = Meta("ds", "llm", server_labels("ds"))

# The seed's Deployment args, flag by flag.
SEED_ARGV = [
    "-m", "/models/DeepSeek-V4-Flash-0731-UD-IQ1_M-00001-of-00003.gguf",
    "--alias", "deepseek-v4-flash-0731",
    "--host", "0.0.0.0",
    "--port", "8080",
    "--jinja",
    "-ngl", "40",
    "-c", "65536",
    "-np", "1",
    "--cont-batching",
    "--cache-type-k", "q8_0",
    "--cache-type-v", "q8_0",
    "--temp", "1.0",
    "--top-p", "0.95",
    "--threads", "8",
]  # fmt: skip


@pytest.fixture
def seed_server(strix_halo_values: dict[str, Any]) -> Any:
    stack = strix(strix_halo_values)
    return server_args(stack, fed(stack), unlocked_source(stack), MODEL_VOLUME)  # type: ignore[arg-type]


def test_seed_stack_renders_the_seed_argv(seed_server: Any) -> None:
    assert llama_server_args(seed_server["flags"]) == SEED_ARGV


def test_every_flag_but_speculative_decoding_is_written_by_the_flag_table() -> None:
    assert {*FLAGS, "speculative"} == set(LlamaServerFlags.__annotations__)


def test_argv_follows_typed_fields(seed_server: Any) -> None:
    flags: LlamaServerFlags = copy.deepcopy(seed_server["flags"])
    flags["jinja"] = False
    flags["cont_batching"] = False
    flags["temperature"] = 0.6
    flags["top_p"] = 1
    flags["gpu_layers"] = 38
    argv = llama_server_args(flags)
    assert "--jinja" not in argv
    assert "--no-cont-batching" in argv and "--cont-batching" not in argv
    assert argv[argv.index("--temp") + 1] == "0.6"
    assert argv[argv.index("--top-p") + 1] == "1.0"
    assert argv[argv.index("-ngl") + 1] == "38"


def test_a_stack_files_n_predict_is_rendered_and_unset_leaves_llama_servers_own(
    strix_halo_values: dict[str, Any],
) -> None:
    strix_halo_values["server"]["nPredict"] = 4096
    stack = strix(strix_halo_values)
    flags = server_args(stack, fed(stack), unlocked_source(stack), MODEL_VOLUME)["flags"]  # type: ignore[arg-type]
    argv = llama_server_args(flags)
    assert argv[argv.index("--n-predict") + 1] == "4096"
    del strix_halo_values["server"]["nPredict"]
    stack = strix(strix_halo_values)
    unset = server_args(stack, fed(stack), unlocked_source(stack), MODEL_VOLUME)["flags"]  # type: ignore[arg-type]
    assert "--n-predict" not in llama_server_args(unset)


def test_cache_ram_is_passed_only_when_configured(seed_server: Any) -> None:
    flags: LlamaServerFlags = copy.deepcopy(seed_server["flags"])
    assert "--cache-ram" not in llama_server_args(flags)
    flags["cache_ram_mib"] = 2048
    assert llama_server_args(flags)[-2:] == ["--cache-ram", "2048"]


def test_deployment_reproduces_seed_pod(seed_server: Any) -> None:
    deployment = server_deployment(DS, seed_server)
    pod = deployment["spec"]["template"]["spec"]
    container, proxy = pod["containers"]
    # With metrics, the metrics-only proxy runs beside the server.
    assert (container["name"], proxy["name"]) == ("llama-server", "metrics-proxy")
    assert container["image"] == "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434"
    # The seed's flags, then the GPU gate's load log and the metrics endpoint.
    assert container["args"][: len(SEED_ARGV)] == SEED_ARGV
    assert container["args"][len(SEED_ARGV) :] == [
        "-lv",
        "4",
        "--log-file",
        "/logs/llama-server.log",
        "--metrics",
    ]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "hardware": "high-memory"}
    assert container["resources"] == {
        "requests": {"cpu": "1000m", "memory": "4Gi"},
        "limits": {"cpu": "4000m", "memory": "20Gi"},
    }
    readiness = container["readinessProbe"]
    assert readiness["httpGet"]["path"] == "/health"
    assert (readiness["initialDelaySeconds"], readiness["periodSeconds"]) == (30, 10)
    assert readiness["failureThreshold"] == 6
    liveness = container["livenessProbe"]
    assert (liveness["httpGet"]["path"], liveness["periodSeconds"]) == ("/health", 30)
    assert liveness["failureThreshold"] == 5
    assert container["securityContext"] == {"privileged": True, "readOnlyRootFilesystem": True}
    dri = next(v for v in pod["volumes"] if v["name"] == "dev-dri")
    assert dri["hostPath"]["path"] == "/dev/dri"
    assert {"name": "dev-dri", "mountPath": "/dev/dri"} in container["volumeMounts"]


def test_gpu_gate_makes_the_startup_probe_read_the_load_log(seed_server: Any) -> None:
    pod = server_deployment(DS, seed_server)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    command = container["startupProbe"]["exec"]["command"]
    assert command[:2] == ["sh", "-c"]
    assert "offloaded [0-9]*/[0-9]* layers to GPU" in command[2]
    assert "want=40" in command[2] and "/logs/llama-server.log" in command[2]
    assert {"name": "logs", "emptyDir": {"sizeLimit": "4Gi"}} in pod["volumes"]
    without: Any = {**seed_server, "gpu_gate": False}
    plain = server_deployment(DS, without)["spec"]["template"]["spec"]
    assert plain["containers"][0]["startupProbe"]["httpGet"]["path"] == "/health"
    assert plain["containers"][0]["args"] == [*SEED_ARGV, "--metrics"]


def test_startup_probe_lets_the_load_run_before_liveness(seed_server: Any) -> None:
    container = server_deployment(DS, seed_server)["spec"]["template"]["spec"]["containers"][0]
    startup = container["startupProbe"]
    window = startup["initialDelaySeconds"] + startup["periodSeconds"] * startup["failureThreshold"]
    # Liveness only starts after startup succeeds: the seed's 300 s floor is covered and more.
    assert window >= 300
    assert window == probe_window_seconds(seed_server["probes"]["startup"])


def test_deployment_is_recreate_with_a_deadline_covering_the_load(seed_server: Any) -> None:
    spec = server_deployment(DS, seed_server)["spec"]
    assert spec["strategy"] == {"type": "Recreate"}
    assert spec["replicas"] == 1
    assert spec["progressDeadlineSeconds"] > probe_window_seconds(seed_server["probes"]["startup"])


def test_model_volume_is_read_only_and_checked_before_start(seed_server: Any) -> None:
    pod = server_deployment(DS, seed_server)["spec"]["template"]["spec"]
    models = next(v for v in pod["volumes"] if v["name"] == "models")
    assert models["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "models")
    assert mount["readOnly"] is True
    (check,) = pod["initContainers"]
    assert check["command"][2] == "check"
    assert all(m["readOnly"] for m in check["volumeMounts"] if m["name"] in ("models", "fetcher"))
    assert check["securityContext"]["runAsNonRoot"] is True


def test_service_targets_the_server_port() -> None:
    service = server_service(DS, 8080)
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]


def test_service_with_metrics_targets_the_proxy_port_by_name() -> None:
    service = server_service(DS, 8080, 9464)
    assert service["spec"]["ports"][1] == {
        "name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"
    }  # fmt: skip
    assert set(service["spec"]["selector"].items()) <= set(server_labels("ds").items())


def test_pvc_uses_local_path_and_requested_size() -> None:
    pvc = model_pvc(Meta("models", "llm", {}), "120Gi", "local-path")
    assert pvc["spec"]["storageClassName"] == "local-path"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "120Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_job_runs_fetcher_on_the_server_node_with_token_from_secret(
    strix_halo_values: dict[str, Any],
) -> None:
    stack = strix(strix_halo_values)
    args = store_args(stack, fed(stack), unlocked_source(stack), None)
    job = fetch_job(
        Meta("models-fetch-1", "llm", {}), image=args["fetch_image"], claim_name="models",
        config_map="cm", node_selector=args["node_selector"], retired=["Qwen3.6*.gguf"],
        parallel=3, timeout_seconds=43200, hf_endpoint=None, token_secret="models-hf-token",
    )  # fmt: skip
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "hardware": "high-memory"}
    assert container["command"][:3] == ["python3", "/opt/llm-infra/fetcher.py", "fetch"]
    assert container["command"][-2:] == ["--retire", "Qwen3.6*.gguf"]
    assert not any("pip" in part for part in container["command"])
    token = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "models-hf-token", "key": "token"}},
    }
    assert job["spec"]["activeDeadlineSeconds"] == 43200
    assert parse_image(container["image"]).pinned


def test_job_without_token_has_no_token_env() -> None:
    job = fetch_job(
        Meta("j", "llm", {}), image="python:3.12.8-slim", claim_name="models", config_map="cm",
        node_selector={}, retired=[], parallel=1, timeout_seconds=60, hf_endpoint=None,
        token_secret=None,
    )  # fmt: skip
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["PYTHONUNBUFFERED", "HOME"]


def test_a_new_lock_gets_a_new_job_and_config_map() -> None:
    files = [{"path": "a/m-00001-of-00001.gguf", "name": "m-00001-of-00001.gguf"}]
    old = fetch_document("o/r", "main", files)  # type: ignore[arg-type]
    new = fetch_document("o/r", "abc123", files)  # type: ignore[arg-type]
    assert lock_digest(old) != lock_digest(new)
    old_names, new_names = (
        store_names("models", content_digest(lock_digest(old), FETCHER_SOURCE.read_text())),
        store_names("models", content_digest(lock_digest(new), FETCHER_SOURCE.read_text())),
    )
    assert old_names["job"] != new_names["job"]
    assert old_names["config_map"] != new_names["config_map"]
    assert old_names["pvc"] == new_names["pvc"] == "models"


def test_config_map_carries_fetcher_and_lock() -> None:
    lock = fetch_document("o/r", "main", [{"path": "x.gguf", "name": "x.gguf"}])
    config_map = fetcher_config_map(Meta("cm", "llm", {}), lock, FETCHER_SOURCE.read_text())
    assert "def main(" in config_map["data"]["fetcher.py"]
    assert '"repo": "o/r"' in config_map["data"]["lock.json"]
    assert config_map["immutable"] is True


@pytest.mark.parametrize(
    ("reference", "pinned"),
    [
        ("ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434", True),
        ("ghcr.io/ggml-org/llama.cpp:server-vulkan", False),
        ("python:3.12.8-slim-bookworm", True),
        ("python:3.12-slim", False),
        ("python", False),
        ("localhost:5000/img:latest", False),
        ("vllm/vllm-openai-rocm@sha256:" + "a" * 64, True),
    ],
)
def test_image_pinning(reference: str, pinned: bool) -> None:
    assert parse_image(reference).pinned is pinned


@pytest.mark.parametrize("reference", ["", "Upper/case:1.2.3", "x:bad tag", "x@sha256:12"])
def test_malformed_image_references_raise(reference: str) -> None:
    with pytest.raises(ValueError):
        parse_image(reference)


def test_device_plugin_mode_drops_every_privilege(seed_server: Any) -> None:
    args: Any = {
        **seed_server,
        "gpu_access": "device-plugin",
        "supplemental_groups": [991],
    }
    pod = server_deployment(DS, args)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    context = container["securityContext"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsNonRoot"] is True and context["readOnlyRootFilesystem"] is True
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"]["amd.com/gpu"] == "1"
    assert pod["securityContext"]["supplementalGroups"] == [991]
    assert not any("hostPath" in v for v in pod["volumes"])
    assert all(m["name"] != "dev-dri" for m in container["volumeMounts"])


def test_a_non_root_server_can_read_its_api_key_file_through_the_pods_fs_group(
    seed_server: Any,
) -> None:
    args: Any = {**seed_server, "gpu_access": "device-plugin", "api_key": "sk-not-rendered"}
    pod = server_deployment(DS, args)["spec"]["template"]["spec"]
    user = pod["containers"][0]["securityContext"]["runAsUser"]
    # A Secret's files are root's: the non-root server reads the key as the fsGroup, mode 0440.
    assert pod["securityContext"]["fsGroup"] == user != 0
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "api-key")
    assert secret_volume["secret"]["defaultMode"] == 0o440
    # A privileged server runs as root: owner-only, no fsGroup.
    root: Any = {**seed_server, "api_key": "sk-not-rendered"}
    pod = server_deployment(DS, root)["spec"]["template"]["spec"]
    assert "fsGroup" not in pod["securityContext"]


def test_api_key_is_a_file_from_a_secret_never_in_argv(seed_server: Any) -> None:
    args: Any = {**seed_server, "api_key": "sk-not-rendered"}
    pod = server_deployment(DS, args)["spec"]["template"]["spec"]
    container, proxy = pod["containers"]
    assert container["args"][-2:] == ["--api-key-file", "/run/secrets/llama-server/api-key"]
    assert "sk-not-rendered" not in str(pod)
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "api-key")
    assert secret_volume["secret"] == {"secretName": "ds-api-key", "defaultMode": 0o400}
    # The metrics proxy reads the key from the same Secret, through its environment.
    assert {"name": "LLM_INFRA_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "ds-api-key", "key": "api-key"}}} in proxy["env"]  # fmt: skip
    assert "api-key" not in [m["name"] for m in proxy["volumeMounts"]]


def test_ingress_policy_admits_only_the_clients_on_the_server_port() -> None:
    policy = ingress_policy(
        Meta("ds-ingress", "llm", {}), {"app": "ds"}, 8080,
        [{"namespace": "litellm"}, {"namespace": "tools", "pod_labels": {"app": "bench"}}],
    )  # fmt: skip
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "litellm"}}},
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tools"}},
            "podSelector": {"matchLabels": {"app": "bench"}},
        },
    ]
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_fetch_egress_policy_allows_dns_and_the_hub_port_only() -> None:
    policy = egress_policy(Meta("f", "llm", {}), {"app": "fetch"}, [hub_port(None)])
    dns, hub = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert hub["ports"] == [{"port": 443, "protocol": "TCP"}]
    assert hub_port("http://mirror.local:8081/hf") == 8081


def test_ingress_policy_can_admit_a_node_network(strix_halo_values: dict[str, Any]) -> None:
    from infra.targets.kubernetes import allowed_clients

    strix_halo_values["network"] = {"allowCidrs": ["192.168.1.10/32"]}
    stack = strix(strix_halo_values)
    clients = allowed_clients(stack, fed(stack))
    assert clients == [{"namespace": "litellm", "pod_labels": {}}, {"cidr": "192.168.1.10/32"}]
    policy = ingress_policy(Meta("ds-ingress", "llm", {}), {"app": "ds"}, 8080, clients)
    assert {"ipBlock": {"cidr": "192.168.1.10/32"}} in policy["spec"]["ingress"][0]["from"]


@pytest.mark.parametrize(("upgrade", "tail"), [("keep", ["--parallel", "1"]),
                                               ("replace", ["--upgrade", "replace"])])  # fmt: skip
def test_job_passes_replace_to_the_fetcher_and_leaves_keep_to_its_default(
    upgrade: str, tail: list[str]
) -> None:
    job = fetch_job(
        Meta("j", "llm", {}), image="python:3.12.8-slim", claim_name="models", config_map="cm",
        node_selector={}, retired=[], parallel=1, timeout_seconds=60, hf_endpoint=None,
        token_secret=None, upgrade=upgrade,
    )  # fmt: skip
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == tail


def test_store_args_carry_the_upgrade_mode_and_the_preflight_from_the_server(
    strix_halo_values: dict[str, Any],
) -> None:
    for mode in ("keep", "replace"):
        strix_halo_values["store"] = {**strix_halo_values["store"], "upgrade": mode}
        stack = strix(strix_halo_values)
        assert store_args(stack, fed(stack), unlocked_source(stack), None).get("upgrade") == mode
    strix_halo_values["store"] = {**strix_halo_values["store"], "nodePreflight": True}
    stack = strix(strix_halo_values)
    args = store_args(stack, fed(stack), unlocked_source(stack), None)
    assert args.get("node_preflight") == {
        "image": stack.server.server_image,
        "gpu_access": "privileged",
        "min_gpu_memory_gib": 90,
        "cpu_variant": "zen4",  # memory.nodeCpu: zen5
        "gpu_device_path": DEFAULT_DRI_DEVICE,  # NodePreflight's default, filled in
    }
    del strix_halo_values["store"]["nodePreflight"]
    stack = strix(strix_halo_values)
    assert store_args(stack, fed(stack), unlocked_source(stack), None).get("node_preflight") is None
