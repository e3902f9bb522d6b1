"""The policy pack: both stacks' real renders pass, crafted violations fail with the message."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi_policy import PolicyResourceOptions, ResourceValidationArgs
from pulumi_policy.policy import PolicyCustomTimeouts

import policy.__main__ as pack
from policy import resources, validators
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
Render = tuple[list[dict[str, Any]], dict[str, str]]


def render(stack: str, out: Path) -> Path:
    """`llm-infra render STACK` of this tree's code into out."""
    result = run_cli(["render", stack, "--out", str(out)], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def render_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fresh renders of both stacks (rendered once per module: ~1.5 s each)."""
    base = tmp_path_factory.mktemp("renders")
    return {stack: render(stack, base / stack) for stack in ("strix-halo", "mi300x")}


@pytest.fixture
def strix(render_dirs: dict[str, Path]) -> Render:
    """A mutable copy of the strix-halo render."""
    resources, files = validators.load_render(render_dirs["strix-halo"])
    return copy.deepcopy(resources), files


@pytest.fixture
def mi300x(render_dirs: dict[str, Path]) -> Render:
    """A mutable copy of the mi300x render."""
    resources, files = validators.load_render(render_dirs["mi300x"])
    return copy.deepcopy(resources), files


def named(resources: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    """The one resource whose name ends with suffix."""
    (found,) = [r for r in resources if r["name"].endswith(suffix)]
    return found


def server_container(resources: list[dict[str, Any]]) -> dict[str, Any]:
    """The llama-server container of the strix-halo Deployment."""
    spec = named(resources, "-deployment")["inputs"]["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "llama-server"]
    return container  # type: ignore[no-any-return]


def edited(files: dict[str, str], path: str, old: str, new: str) -> None:
    """Rewrite `old` as `new` in the rendered file at `path` (which must hold `old`)."""
    assert old in files[path], (path, old)
    files[path] = files[path].replace(old, new)


def messages(resources: list[dict[str, Any]], files: dict[str, str], **options: Any) -> list[str]:
    """Every violation as `[policy] resource: message`."""
    return [str(v) for v in validators.check_resources(resources, files, **options)]


@pytest.mark.parametrize("stack", ["strix-halo", "mi300x"])
def test_real_render_passes_every_policy_and_says_what_it_checked(
    render_dirs: dict[str, Path], stack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert validators.check_render(render_dirs[stack]) == []
    assert validators.main([str(render_dirs[stack])]) == 0
    resources, files = validators.load_render(render_dirs[stack])
    assert capsys.readouterr().out == (
        f"{render_dirs[stack]}: {len(resources)} resources and {len(files)} host files checked "
        f"against 5 policies ({', '.join(validators.POLICY_NAMES)}): no violations\n"
    )
    assert len(resources) > 5 and (stack != "mi300x" or len(files) > 3)


def test_a_failing_render_lists_each_violation_then_the_count(
    render_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resources, _ = validators.load_render(render_dirs["strix-halo"])
    for resource in resources:
        if resource["type"] == "kubernetes:core/v1:PersistentVolumeClaim":
            resource.setdefault("options", {})["protect"] = False
    (tmp_path / "resources.json").write_text(json.dumps(resources))
    assert validators.main([str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith(f": {len(lines) - 1} violations") and len(lines) >= 2
    assert all("[model-pvc-protected]" in line for line in lines[:-1])


def test_real_renders_contain_what_the_policies_inspect(strix: Render, mi300x: Render) -> None:
    # Guards against passing by finding nothing: each rule has something to look at.
    assert resources.containers(named(strix[0], "-deployment"))
    assert named(strix[0], "models-pvc")["options"]["protect"] is True
    assert {"/opt/llm/compose.yaml", "/opt/llm/Caddyfile"} <= set(mi300x[1])


def test_floating_image_tag_fails(strix: Render) -> None:
    resources, files = strix
    server_container(resources)["image"] = "ghcr.io/ggml-org/llama.cpp:server-vulkan"
    assert messages(resources, files) == [
        "[images-pinned] deepseek-v4-flash-0731-deployment: container llama-server image "
        "'ghcr.io/ggml-org/llama.cpp:server-vulkan' is not pinned: use a digest (@sha256:...) "
        "or a tag that names one build (x.y.z or bNNNN)"
    ]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            "caddy:2.11.7-alpine",
            "caddy:latest",
            "[images-pinned] vllm-compose: compose service caddy image 'caddy:latest' is not "
            "pinned: use a digest (@sha256:...) or a tag that names one build (x.y.z or bNNNN)",
            id="floating-image",
        ),
        pytest.param(
            "start_period: 3600s",
            "start_period: 1m",
            "[gpu-server-probes] vllm-compose: compose service vllm: healthcheck allows 105s "
            "(start_period + interval x retries), less than the 300s model load",
            id="healthcheck-start-period-shorter-than-the-load",
        ),
    ],
)
def test_a_compose_file_edit_fails_its_policy(
    mi300x: Render, old: str, new: str, message: str
) -> None:
    resources, files = mi300x
    edited(files, "/opt/llm/compose.yaml", old, new)
    assert messages(resources, files) == [message]


def test_startup_probe_shorter_than_the_load_fails(strix: Render) -> None:
    resources, files = strix
    server_container(resources)["startupProbe"]["failureThreshold"] = 10
    assert messages(resources, files) == [
        "[gpu-server-probes] deepseek-v4-flash-0731-deployment: container llama-server: "
        "startupProbe allows 130s (initialDelaySeconds + periodSeconds x failureThreshold), less "
        "than the 300s model load: the pod would be killed while loading (raise failureThreshold)"
    ]


def test_min_load_is_configurable(render_dirs: dict[str, Path]) -> None:
    # The default startup probe allows 30 + 10 x 177 = 1800 s.
    assert validators.check_render(render_dirs["strix-halo"], min_load_seconds=1800) == []
    (violation,) = validators.check_render(render_dirs["strix-halo"], min_load_seconds=1801)
    assert "startupProbe allows 1800s" in violation.message


def test_gpu_server_without_startup_probe_falls_back_to_liveness(strix: Render) -> None:
    resources, files = strix
    container = server_container(resources)
    del container["startupProbe"]
    # The liveness probe alone allows 0 + 30 x 5 = 150 s: it would kill a loading server.
    assert any("livenessProbe allows 150s" in m for m in messages(resources, files))
    del container["livenessProbe"]
    assert any(
        "a GPU server without a startupProbe or livenessProbe" in m
        for m in messages(resources, files)
    )


def test_compose_up_wait_timeout_shorter_than_the_load_fails(mi300x: Render) -> None:
    resources, files = mi300x
    up = named(resources, "vllm-up")
    up["inputs"]["create"] = up["inputs"]["create"].replace(
        "--wait-timeout 3600", "--wait-timeout 60"
    )
    assert messages(resources, files) == [
        "[gpu-server-probes] vllm-up: `docker compose up --wait-timeout 60` gives up before the "
        "300s model load"
    ]


def test_hf_token_literal_in_env_fails(strix: Render) -> None:
    resources, files = strix
    server_container(resources)["env"].append({"name": "HF_TOKEN", "value": "hf_" + "a" * 34})
    assert messages(resources, files) == [
        "[no-secret-literals] deepseek-v4-flash-0731-deployment: container llama-server: env "
        "HF_TOKEN has a literal value; take it from a Secret (valueFrom.secretKeyRef, an "
        "env_file) instead"
    ]


def test_env_from_a_secret_and_api_key_from_a_variable_pass(strix: Render) -> None:
    resources, files = strix
    container = server_container(resources)
    ref = {"secretKeyRef": {"name": "llm-api-key", "key": "key"}}
    container["env"].append({"name": "LLAMA_API_KEY", "valueFrom": ref})
    container["args"] += ["--api-key", "$(LLAMA_API_KEY)", "--api-key-file", "/run/key"]
    assert messages(resources, files) == []


def test_api_key_flag_with_a_literal_fails(strix: Render) -> None:
    resources, files = strix
    server_container(resources)["args"] += ["--api-key=sk-" + "x" * 24]
    assert messages(resources, files) == [
        "[no-secret-literals] deepseek-v4-flash-0731-deployment: container llama-server: "
        "`--api-key` is given a literal value; pass a file (--api-key-file) or a variable set "
        "from a Secret",
        "[no-secret-literals] deepseek-v4-flash-0731-deployment: container llama-server: "
        "contains what looks like a credential (sk-xx...)",
    ]


def test_secret_literals_in_compose_and_scripts_fail(mi300x: Render) -> None:
    resources, files = mi300x
    edited(
        files,
        "/opt/llm/compose.yaml",
        "HF_HUB_OFFLINE: '1'",
        "HF_HUB_OFFLINE: '1'\n      VLLM_API_KEY: s3cret",
    )
    check = named(resources, "vllm-check")
    check["inputs"]["create"] += "\ncurl -H 'Authorization: Bearer sk-abcdefghijklmnopqrstu' x\n"
    assert messages(resources, files) == [
        "[no-secret-literals] vllm-compose: compose service vllm: env VLLM_API_KEY has a "
        "literal value; take it from a Secret (valueFrom.secretKeyRef, an env_file) instead",
        "[no-secret-literals] vllm-check: create script: contains what looks like a credential "
        "(sk-ab...)",
    ]


def test_unprotected_model_pvc_fails(strix: Render) -> None:
    resources, files = strix
    del named(resources, "models-pvc")["options"]["protect"]
    assert messages(resources, files) == [
        "[model-pvc-protected] models-pvc: a model PVC without `protect`: a replace or destroy "
        "would delete the downloaded weights (set ResourceOptions(protect=True))"
    ]


@pytest.mark.parametrize(
    "world", ["0.0.0.0/0 ::/0", "0.0.0.0/1 128.0.0.0/1", "::/1 8000::/1", "0.0.0.0/0"]
)
def test_caddy_allowlist_open_to_the_world_fails_unless_allowed(mi300x: Render, world: str) -> None:
    resources, files = mi300x
    edited(files, "/opt/llm/Caddyfile", "198.51.100.0/24", world)
    (message,) = messages(resources, files)
    assert message.startswith("[caddy-allowlist] vllm-caddyfile: /opt/llm/Caddyfile: the allowlist")
    assert "together admits every address, i.e. the whole internet" in message
    assert messages(resources, files, allow_world=True) == []


def test_caddy_allowlist_of_large_networks_passes(mi300x: Render) -> None:
    resources, files = mi300x
    edited(files, "/opt/llm/Caddyfile", "198.51.100.0/24", "0.0.0.0/1 10.0.0.0/8 ::/1")
    assert messages(resources, files) == []


def test_caddyfile_without_an_allowlist_fails(mi300x: Render) -> None:
    resources, files = mi300x
    lines = files["/opt/llm/Caddyfile"].splitlines()
    files["/opt/llm/Caddyfile"] = "\n".join(
        line for line in lines if "remote_ip" not in line and "@denied" not in line
    )
    assert any("no remote_ip/client_ip allowlist" in m for m in messages(resources, files))


@pytest.mark.parametrize(
    ("text", "seconds"), [("3600s", 3600), ("1h30m", 5400), ("90", 90), ("1m30s", 90), (45, 45)]
)
def test_compose_durations(text: object, seconds: float) -> None:
    assert resources.duration_seconds(text) == seconds


def test_malformed_duration_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        resources.duration_seconds("ten minutes")


# --- the pulumi_policy wiring ---------------------------------------------------------------


def policy_args(
    resource_type: str, props: dict[str, Any], protect: bool = False, **config: Any
) -> ResourceValidationArgs:
    """What the Pulumi engine hands a resource policy."""
    options = PolicyResourceOptions(
        protect=protect, ignore_changes=[], delete_before_replace=None, aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[],
    )  # fmt: skip
    urn = f"urn:pulumi:dev::llm-infra::{resource_type}::r"
    return ResourceValidationArgs(resource_type, props, urn, "r", options, None, config)


def run_policy(name: str, args: ResourceValidationArgs) -> list[str]:
    """Messages the named policy of the pack reports for args."""
    (found,) = [p for p in pack.policies() if p.name == name]
    reported: list[str] = []

    def report(message: str, urn: str | None = None) -> None:
        reported.append(message)

    found.validate(args, report)
    return reported


def test_pack_has_one_policy_per_validator() -> None:
    assert tuple(p.name for p in pack.policies()) == validators.POLICY_NAMES


def test_pack_reads_caddyfile_from_the_copied_asset_and_honours_allow_world(
    mi300x: Render,
) -> None:
    caddyfile = mi300x[1]["/opt/llm/Caddyfile"].replace("198.51.100.0/24", "0.0.0.0/0")
    props = {"remotePath": "/opt/llm/Caddyfile", "source": pulumi.StringAsset(caddyfile)}
    args = policy_args("command:remote:CopyToRemote", props)
    assert run_policy("caddy-allowlist", args) == [
        "/opt/llm/Caddyfile: the allowlist 0.0.0.0/0 127.0.0.1/32 ::1/128 together admits "
        "every address, i.e. the whole internet (set allowWorld in the policy config if that "
        "is intended)"
    ]
    allowed = policy_args("command:remote:CopyToRemote", props, allowWorld=True)
    assert run_policy("caddy-allowlist", allowed) == []


def test_each_caddy_site_has_its_own_allowlist(mi300x: Render) -> None:
    # The metrics site opened to everyone is reported although the API site is narrow.
    caddyfile = mi300x[1]["/opt/llm/Caddyfile"].replace("192.0.2.0/24", "0.0.0.0/0 ::/0")
    props = {"remotePath": "/opt/llm/Caddyfile", "source": pulumi.StringAsset(caddyfile)}
    assert run_policy("caddy-allowlist", policy_args("command:remote:CopyToRemote", props)) == [
        "/opt/llm/Caddyfile: the allowlist 0.0.0.0/0 ::/0 together admits every address, i.e. "
        "the whole internet (set allowWorld in the policy config if that is intended)"
    ]
    # Two halves of the address space on two sites are two narrow allowlists, not one open one.
    halves = (
        mi300x[1]["/opt/llm/Caddyfile"]
        .replace("198.51.100.0/24", "0.0.0.0/1 ::/1")
        .replace("192.0.2.0/24", "128.0.0.0/1 8000::/1")
    )
    props = {"remotePath": "/opt/llm/Caddyfile", "source": pulumi.StringAsset(halves)}
    assert run_policy("caddy-allowlist", policy_args("command:remote:CopyToRemote", props)) == []


def test_pack_reads_protect_from_the_resource_options(strix: Render) -> None:
    pvc = named(strix[0], "models-pvc")
    kind = "kubernetes:core/v1:PersistentVolumeClaim"
    assert run_policy("model-pvc-protected", policy_args(kind, pvc["inputs"], protect=True)) == []
    assert len(run_policy("model-pvc-protected", policy_args(kind, pvc["inputs"]))) == 1


def test_pack_passes_min_load_seconds_from_its_config(strix: Render) -> None:
    deployment = named(strix[0], "-deployment")
    kind = "kubernetes:apps/v1:Deployment"
    assert run_policy("gpu-server-probes", policy_args(kind, deployment["inputs"])) == []
    strict = policy_args(kind, deployment["inputs"], minLoadSeconds=3600)
    assert run_policy("gpu-server-probes", strict) == [
        "container llama-server: startupProbe allows 1800s (initialDelaySeconds + periodSeconds"
        " x failureThreshold), less than the 3600s model load: the pod would be killed while "
        "loading (raise failureThreshold)"
    ]


def test_pack_metadata_names_a_python_runtime_and_the_installed_sdk() -> None:
    metadata = yaml.safe_load((ROOT / "policy/PulumiPolicy.yaml").read_text())
    assert metadata["runtime"]["name"] == "python"
    assert metadata["version"]
    requirements = (ROOT / "policy/requirements.txt").read_text().splitlines()
    assert f"pulumi-policy=={importlib.metadata.version('pulumi-policy')}" in requirements


def test_pack_serves_its_policies_to_the_pulumi_engine(tmp_path: Path) -> None:
    # What `pulumi preview --policy-pack policy` does first: start the pack and ask what it holds.
    import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs; pulumi pulls it in
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import analyzer_pb2_grpc

    process = subprocess.Popen(
        [sys.executable, str(ROOT / "policy/__main__.py")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = analyzer_pb2_grpc.AnalyzerStub(channel).GetAnalyzerInfo(
                empty_pb2.Empty(), timeout=30
            )
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert info.name == pack.PACK_NAME
    assert tuple(p.name for p in info.policies) == validators.POLICY_NAMES


def test_a_run_to_completion_job_in_the_server_image_is_no_gpu_server(strix: Render) -> None:
    resources, files = strix
    deployment = named(resources, "deepseek-v4-flash-0731-deployment")
    job: dict[str, Any] = {
        "type": "kubernetes:batch/v1:Job",
        "name": "models-preflight",
        "inputs": {
            "kind": "Job",
            "spec": {"template": copy.deepcopy(deployment["inputs"]["spec"]["template"])},
        },
    }
    for container in job["inputs"]["spec"]["template"]["spec"]["containers"]:
        container.pop("startupProbe", None)
        container.pop("livenessProbe", None)
    assert validators.check_gpu_server_probes(job, files) == []
    as_deployment = {**job, "type": "kubernetes:apps/v1:Deployment"}
    as_deployment["inputs"] = {**job["inputs"], "kind": "Deployment"}
    assert validators.check_gpu_server_probes(as_deployment, files)


def test_rpc_server_is_no_gpu_server_but_a_llama_server_without_probes_is() -> None:
    def deployment(container: dict[str, Any]) -> dict[str, Any]:
        spec = {"template": {"spec": {"containers": [container]}}}
        return {"type": "kubernetes:apps/v1:Deployment", "name": "x", "inputs": {"spec": spec}}

    image = "registry.lan/llama.cpp:vulkan-rpc-b11434"
    worker = {"name": "rpc-server", "image": image, "command": ["/app/ggml-rpc-server", "-p", "1"]}
    assert validators.check_gpu_server_probes(deployment(worker)) == []
    server = {"name": "llama-server", "image": image}
    (problem,) = validators.check_gpu_server_probes(deployment(server))
    assert "without a startupProbe or livenessProbe" in problem


# --- the Caddyfile as Caddy reads it ------------------------------------------------------------


def caddy_messages(mi300x: Render, caddyfile: str) -> list[str]:
    resources, files = mi300x
    return [
        m
        for m in messages(resources, {**files, "/opt/llm/Caddyfile": caddyfile})
        if m.startswith("[caddy-allowlist]")
    ]


def test_an_inverted_allowlist_is_a_denylist_and_fails(mi300x: Render) -> None:
    caddyfile = mi300x[1]["/opt/llm/Caddyfile"].replace(
        "@denied not remote_ip 198.51.100.0/24", "@denied remote_ip 198.51.100.0/24"
    )
    (message,) = caddy_messages(mi300x, caddyfile)
    assert "site llm.example.com on :443" in message
    assert "a denylist (remote_ip without not)" in message


def test_an_extra_site_without_an_allowlist_fails(mi300x: Render) -> None:
    caddyfile = mi300x[1]["/opt/llm/Caddyfile"] + (
        "\nbackdoor.example.com {\n\treverse_proxy vllm:8000\n}\n"
    )
    (message,) = caddy_messages(mi300x, caddyfile)
    assert "site backdoor.example.com on :443: no remote_ip/client_ip allowlist" in message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # A `route` block is kept in place by Caddy: it runs before the allowlist's respond.
        ("\t# remote_ip is the TCP peer",
         "\troute /v1/* {\n\t\treverse_proxy vllm:8000\n\t}\n\t# remote_ip is the TCP peer"),
        # Written after the allowlist, but Caddy orders `handle` before `respond`: it runs first.
        ('respond @not_api "Not Found" 404',
         'respond @not_api "Not Found" 404\n\thandle /v1/* {\n\t\treverse_proxy vllm:8000\n\t}'),
    ],
    ids=["route-injected-ahead", "handle-block-injected-after"],
)  # fmt: skip
def test_a_route_or_handle_block_injected_runs_ahead_of_the_allowlist_and_fails(
    mi300x: Render, old: str, new: str
) -> None:
    (message,) = caddy_messages(mi300x, mi300x[1]["/opt/llm/Caddyfile"].replace(old, new))
    assert "a route runs ahead of the allowlist" in message


def test_a_directive_caddy_orders_after_the_allowlist_passes(mi300x: Render) -> None:
    # Written first, but `reverse_proxy` sorts after `respond`: the allowlist still runs first.
    caddyfile = mi300x[1]["/opt/llm/Caddyfile"].replace(
        "\t# remote_ip is the TCP peer",
        "\treverse_proxy /other/* vllm:8000\n\t# remote_ip is the TCP peer",
    )
    assert caddy_messages(mi300x, caddyfile) == []


def test_an_allowlist_that_does_not_refuse_fails(mi300x: Render) -> None:
    caddyfile = mi300x[1]["/opt/llm/Caddyfile"].replace(
        'respond @denied "Forbidden" 403', 'respond @denied "ok" 200', 1
    )
    (message,) = caddy_messages(mi300x, caddyfile)
    assert "an allowlist that does not answer 403" in message


def test_a_caddyfile_caddy_cannot_read_fails(mi300x: Render) -> None:
    (message,) = caddy_messages(mi300x, mi300x[1]["/opt/llm/Caddyfile"] + "\n}\n")
    assert "caddy cannot read it" in message
