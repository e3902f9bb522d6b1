"""Pure builders of VllmRocmServer: vLLM argv, compose file, Caddyfile and host scripts."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from components.vllm.builders import (
    PRIVILEGE_REASONS,
    compose_yaml,
    generated_header,
    lock_json,
    patch_remote_path,
    vllm_serve_args,
    with_generated_header,
)
from components.vllm.caddyfile import base_url, caddyfile
from components.vllm.host_scripts import (
    MODELS_PROBE,
    check_script,
    down_script,
    env_file_content,
    env_file_script,
    preflight_script,
    remote_command,
    remote_script,
    up_script,
    verify_script,
)
from components.vllm.inputs import VllmFlags
from tests.support.vllm_samples import (
    MODEL,
    MODEL_DIR,
    PATHS,
    all_scripts,
    sample_caddy,
    sample_compose,
    sample_flags,
    sample_patch,
)


def test_serve_args_are_the_seed_command_line() -> None:
    assert vllm_serve_args_text() == (
        "vllm serve /models/DeepSeek-V4-Flash-0731 --served-model-name deepseek-v4-flash-0731 "
        "--host 0.0.0.0 --port 8000 -tp 1 --max-model-len 262144 --max-num-batched-tokens 2048 "
        "--kv-cache-memory-bytes 20000000000 --kv-offloading-size 96 --kv-offloading-backend "
        'native --speculative-config {"method":"dspark","num_speculative_tokens":7} '
        "--reasoning-parser deepseek_v4 --enable-auto-tool-choice --tool-call-parser deepseek_v4 "
        "--enable-prefix-caching"
    )


def vllm_serve_args_text(flags: VllmFlags | None = None) -> str:
    """The argv joined with spaces, for readable comparisons."""
    return " ".join(vllm_serve_args(flags or sample_flags()))


def test_serve_args_omit_optional_parsers_and_can_disable_prefix_caching() -> None:
    flags = sample_flags()
    flags["speculative_config"] = None
    flags["reasoning_parser"] = None
    flags["tool_call_parser"] = None
    flags["enable_prefix_caching"] = False
    flags["max_num_seqs"] = 8
    flags["kv_offloading_size_gib"] = 0.5
    text = vllm_serve_args_text(flags)
    assert "--speculative-config" not in text
    assert "--enable-auto-tool-choice" not in text
    assert "--reasoning-parser" not in text
    assert text.endswith("--no-enable-prefix-caching")
    assert "--max-num-seqs 8" in text
    assert "--kv-offloading-size 0.5" in text


def test_serve_args_never_carry_an_api_key() -> None:
    assert "--api-key" not in vllm_serve_args_text()


def test_compose_command_follows_the_explicit_vllm_serve_entrypoint() -> None:
    vllm = sample_compose()["services"]["vllm"]
    assert vllm["entrypoint"] == ["vllm", "serve"]
    assert vllm["command"][0] == MODEL
    assert "vllm" not in vllm["command"]


def test_compose_has_the_rocm_device_settings() -> None:
    vllm = sample_compose()["services"]["vllm"]
    assert vllm["devices"] == ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"]
    assert vllm["group_add"] == ["video"]
    assert vllm["ipc"] == "host"
    assert vllm["cap_add"] == ["SYS_PTRACE", "IPC_LOCK"]
    assert vllm["ulimits"] == {"memlock": -1}
    assert vllm["security_opt"] == ["seccomp=unconfined"]
    assert vllm["environment"]["VLLM_ROCM_USE_AITER"] == "1"
    assert vllm["env_file"] == ["/opt/llm/vllm.env"]
    assert "/health" in " ".join(vllm["healthcheck"]["test"])
    assert vllm["healthcheck"]["start_period"] == "3600s"


def test_compose_publishes_only_caddy() -> None:
    services = sample_compose()["services"]
    assert "ports" not in services["vllm"]
    assert services["caddy"]["ports"] == ["80:80", "443:443", "443:443/udp"]


def test_compose_mounts_model_and_patches_read_only() -> None:
    volumes = sample_compose()["services"]["vllm"]["volumes"]
    assert volumes[0] == {"type": "bind", "source": MODEL_DIR, "target": MODEL, "read_only": True}
    patch = sample_patch()
    assert volumes[1] == {
        "type": "bind",
        "source": f"/opt/llm/patches/{'a' * 12}-fp8_mi300x.py",
        "target": patch["target"],
        "read_only": True,
    }


def test_a_new_caddyfile_or_lock_changes_the_service_that_uses_it() -> None:
    before = sample_compose()["services"]
    after = sample_compose(caddyfile_sha256="f" * 64, lock_sha256="0" * 64)["services"]
    assert before["caddy"]["labels"] != after["caddy"]["labels"]
    assert before["vllm"]["labels"] != after["vllm"]["labels"]


def test_a_new_patch_content_is_a_new_mount_source() -> None:
    assert patch_remote_path(PATHS, sample_patch("a" * 64)) != patch_remote_path(
        PATHS, sample_patch("b" * 64)
    )


def test_caddyfile_for_a_domain_uses_acme_with_the_email() -> None:
    text = caddyfile(sample_caddy(), upstream="vllm:8000")
    assert "\temail ops@example.com\n" in text
    assert "llm.example.com {\n" in text
    assert "tls internal" not in text


def test_caddyfile_for_an_ip_uses_the_internal_ca_without_touching_trust_stores() -> None:
    text = caddyfile(
        sample_caddy(site="203.0.113.10", tls="internal", acme_email=None), upstream="vllm:8000"
    )
    assert "203.0.113.10 {\n\ttls internal\n" in text
    assert "\tskip_install_trust\n" in text
    assert "email" not in text


def test_caddyfile_denies_outside_the_allowlist_by_peer_address() -> None:
    text = caddyfile(
        sample_caddy(allowed_cidrs=["198.51.100.0/24", "2001:db8::/32"]), upstream="vllm:8000"
    )
    assert "@denied not remote_ip 198.51.100.0/24 2001:db8::/32 127.0.0.1/32 ::1/128\n" in text
    assert 'respond @denied "Forbidden" 403' in text
    assert "trusted_proxies" not in text
    assert "client_ip" not in text.replace("# remote_ip", "")


def test_caddyfile_streams_and_waits_long_and_hides_metrics() -> None:
    text = caddyfile(sample_caddy(), upstream="vllm:8000")
    assert "reverse_proxy vllm:8000 {" in text
    assert "flush_interval -1" in text
    assert "response_header_timeout 30m" in text
    assert "@not_api not path /v1/* /health" in text
    assert 'respond @not_api "Not Found" 404' in text
    assert "admin off" in text


def test_caddyfile_ports_and_upstream_can_be_moved_for_tests() -> None:
    text = caddyfile(sample_caddy(), upstream="127.0.0.1:9000", http_port=8080, https_port=8443)
    assert "\thttp_port 8080\n\thttps_port 8443\n" in text
    assert "llm.example.com:8443 {" in text
    assert "reverse_proxy 127.0.0.1:9000 {" in text


def test_base_url_is_https_on_the_site() -> None:
    assert base_url(sample_caddy()) == "https://llm.example.com"
    assert base_url(sample_caddy(site="2001:db8::1", tls="internal")) == "https://[2001:db8::1]"


def test_every_script_is_strict_bash() -> None:
    for script in all_scripts():
        assert script.startswith("#!/usr/bin/env bash\nset -euo pipefail\n")


def test_preflight_states_the_required_numbers() -> None:
    script = preflight_script(
        base_dir="/opt/llm",
        model_dir=MODEL_DIR,
        requirements={"min_free_disk_gib": 200, "min_ram_gib": 230},
    )
    assert f"need_kib={200 * 1024 * 1024}" in script
    assert f"need_ram_kib={230 * 1024 * 1024}" in script
    assert "/dev/kfd" in script and "/dev/dri" in script
    assert "docker compose version" in script


def test_fetch_runs_the_fetcher_in_the_pinned_image_as_the_ssh_user() -> None:
    script = all_scripts()[2]
    assert "python:3.12.11-slim" in script
    assert '--user "$(id -u):$(id -g)"' in script
    assert f"-v {MODEL_DIR}:/models" in script
    assert "fetcher.py fetch --lock /opt/llm-infra/lock.json" in script
    assert "1" * 64 in script and "2" * 64 in script


def test_up_waits_and_down_keeps_the_model() -> None:
    up = up_script(PATHS, "llm", "3" * 64, 3600)
    assert "up -d --wait" in up and "--wait-timeout 3600" in up and "3" * 64 in up
    down = down_script(PATHS, "llm", MODEL_DIR)
    assert "-p llm down" in down and "--remove-orphans" in down
    assert "rm " not in down and " -v" not in down and "--volumes" not in down


def test_env_file_reads_the_key_from_stdin_and_keeps_it_0600() -> None:
    script = env_file_script(PATHS, "llm")
    assert "umask 077" in script
    assert "cat > /opt/llm/vllm.env.new" in script
    assert "chmod 600" in script


def test_env_file_content_is_literal_for_compose() -> None:
    assert env_file_content("sk-$HOME", "mi300x") == (
        generated_header("mi300x") + "VLLM_API_KEY='sk-$HOME'\n"
    )
    for bad in ("", "a'b", "a\nb"):
        with pytest.raises(ValueError, match="api_key"):
            env_file_content(bad, "mi300x")


def test_generated_header_names_the_stack_and_no_version_or_time() -> None:
    header = generated_header("mi300x")
    assert header.startswith("# Generated by llm-infra from stack mi300x;")
    assert header.endswith("\n") and header.count("\n") == 1
    # The stack name is the header's only variable part: no version, date or time in it.
    assert re.search(r"\d", header.replace("mi300x", "")) is None
    assert header == generated_header("mi300x")
    with pytest.raises(ValueError):
        generated_header("a\nb")


def test_generated_header_goes_first_after_a_shebang_and_never_into_json() -> None:
    header = generated_header("s")
    assert with_generated_header("/opt/llm/compose.yaml", "a: 1\n", "s") == header + "a: 1\n"
    assert with_generated_header("/opt/x.py", "#!/usr/bin/env python3\npass\n", "s") == (
        "#!/usr/bin/env python3\n" + header + "pass\n"
    )
    assert with_generated_header("/opt/llm/model.lock.json", "{}\n", "s") == "{}\n"


def test_compose_says_why_beside_each_privileged_setting() -> None:
    from components.vllm.host_monitoring import GPU_EXPORTER_SERVICE, gpu_exporter_service

    document = sample_compose(
        gpu_exporter=(GPU_EXPORTER_SERVICE, gpu_exporter_service("rocm/exporter:v1.2.1"))
    )
    text = compose_yaml(document)
    reasons = PRIVILEGE_REASONS
    expected = {
        "- /dev/kfd:/dev/kfd": reasons[("devices", "/dev/kfd:/dev/kfd")],
        "- /dev/dri:/dev/dri": reasons[("devices", "/dev/dri:/dev/dri")],
        "- video": reasons[("group_add", "video")],
        "ipc: host": reasons[("ipc", "host")],
        "- SYS_PTRACE": reasons[("cap_add", "SYS_PTRACE")],
        "- IPC_LOCK": reasons[("cap_add", "IPC_LOCK")],
        "- seccomp=unconfined": reasons[("security_opt", "seccomp=unconfined")],
        "memlock: -1": reasons[("ulimits", "memlock")],
    }
    found = []
    for line in text.splitlines():
        setting, _, reason = line.strip().partition("  # ")
        if setting in expected:
            assert reason == expected[setting], line
            found.append(setting)
    # vLLM has each setting once; the GPU exporter its two devices and the video group again.
    assert sorted(found) == sorted([*expected, "- /dev/kfd:/dev/kfd", "- /dev/dri:/dev/dri",
                                    "- video"])  # fmt: skip
    # The comments change nothing: the file is the document, line for line as plain YAML has it.
    assert yaml.safe_load(text) == document
    plain = yaml.safe_dump(document, sort_keys=False, width=100)
    assert [line.split("  # ")[0] for line in text.splitlines()] == plain.splitlines()


def test_compose_refuses_a_privileged_setting_it_cannot_explain() -> None:
    document = sample_compose()
    document["services"]["vllm"]["cap_add"].append("SYS_ADMIN")
    with pytest.raises(ValueError, match="cap_add: 'SYS_ADMIN' has no reason"):
        compose_yaml(document)


def test_check_goes_through_caddy_and_asks_for_the_served_model() -> None:
    script = check_script(PATHS, "llm", sample_caddy(), 8000, "deepseek-v4-flash-0731")
    assert "exec -T caddy wget" in script
    assert "'Host: llm.example.com' https://127.0.0.1/health" in script
    probe = next(line for line in script.splitlines() if "python3 -c" in line)
    assert shlex.split(probe)[-3:] == [MODELS_PROBE, "8000", "deepseek-v4-flash-0731"]
    assert "deepseek" not in MODELS_PROBE and 'os.environ["VLLM_API_KEY"]' in MODELS_PROBE


def test_remote_command_runs_the_script_under_bash_verbatim() -> None:
    wrapped = remote_command("#!/usr/bin/env bash\necho '$x'\n")
    assert wrapped == (
        "bash -c \"$(cat <<'LLM_INFRA_SCRIPT'\n#!/usr/bin/env bash\necho '$x'\n"
        'LLM_INFRA_SCRIPT\n)"\n'
    )
    with pytest.raises(ValueError):
        remote_command("echo LLM_INFRA_SCRIPT\n")


def test_remote_script_gives_back_exactly_the_script_a_command_runs() -> None:
    for script in all_scripts():
        assert remote_script(remote_command(script)) == script
    assert remote_script("echo hello\n") is None
    assert remote_script("# before\n" + remote_command("#!/bin/sh\ntrue\n")) is None


def test_lock_json_is_the_fetcher_format() -> None:
    lock = {"version": 1, "repo": "r", "revision": "v", "files": [{"path": "a", "name": "a"}]}
    assert json.loads(lock_json(lock)) == lock


def test_compose_document_round_trips_as_yaml() -> None:
    document = sample_compose()
    assert yaml.safe_load(compose_yaml(document)) == document


def test_verify_script_runs_on_the_compose_network_without_the_key_in_argv() -> None:
    script = verify_script("/opt/llm", "llm", "python:3.12.11-slim", "vllm:8000", "4" * 64)
    assert "docker run --rm --network llm_default" in script
    assert "-v /opt/llm/vllm.env:/run/llm-infra/vllm.env:ro" in script
    assert "http://vllm:8000" in script and "/opt/llm-infra-verify/expect.json" in script
    assert "VLLM_API_KEY=" not in script
    assert "--min-decode-tps" not in script
    floor = verify_script("/opt/llm", "llm", "python:3.12.11-slim", "vllm:8000", "4" * 64, 120)
    assert floor.rstrip().endswith("--min-decode-tps 120.0")
