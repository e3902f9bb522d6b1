"""The node preflight script, run by bash against fake amdgpu sysfs trees, render nodes and disks
(the real llama-server and shellcheck on it: tests/contract/test_node_preflight.py)."""

from __future__ import annotations

import os
from pathlib import Path

from components.k8s.metadata import Meta
from components.model_store.inputs import NodePreflight
from components.model_store.node_preflight import (
    preflight_job,
    preflight_job_name,
    preflight_script,
)
from components.validation import with_defaults
from tests.support.node_preflight import GIB, MIB, node, run


def test_a_good_node_passes_and_reports_what_it_found(tmp_path: Path) -> None:
    result = run(node(tmp_path).script(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "preflight: render node(s): renderD128" in result.stdout
    assert "preflight: card1 VRAM 96.0 GiB (BIOS UMA frame buffer), GTT 15.5 GiB" in result.stdout
    assert (
        "preflight: llama-server sees Vulkan0: AMD Radeon Graphics (RADV GFX1151) (98304 MiB"
        in result.stdout
    )
    assert result.stdout.rstrip().endswith("preflight: ok")
    assert result.stderr == ""


def test_a_bios_that_gives_the_gpu_too_little_vram_fails_with_the_numbers(tmp_path: Path) -> None:
    result = run(node(tmp_path, vram=64 * GIB).script(), tmp_path)
    assert result.returncode == 1
    (problem, summary) = result.stderr.splitlines()
    assert problem.startswith(
        "preflight: GPU memory: VRAM 64.0 GiB + GTT 15.5 GiB = 79.5 GiB, the plan counts on "
        "90 GiB (memory.vramGib): raise the BIOS UMA frame buffer (UMA split) to at least 90.0 GiB"
    )
    assert f"amdgpu.gttsize={26 * 1024} ttm.pages_limit={26 * GIB // 4096}" in problem
    assert "lower memory.vramGib to at most 79" in problem
    assert summary == "preflight: 1 problem(s); nothing was started"


def test_a_low_gtt_limit_with_a_small_uma_split_fails_naming_the_kernel_settings(
    tmp_path: Path,
) -> None:
    result = run(node(tmp_path, vram=512 * MIB, gtt=62 * GIB).script(), tmp_path)
    assert result.returncode == 1
    problem = result.stderr.splitlines()[0]
    assert "VRAM 0.5 GiB + GTT 62.0 GiB = 62.5 GiB, the plan counts on 90 GiB" in problem
    # 89.5 GiB of GTT: amdgpu.gttsize in MiB, ttm.pages_limit in 4 KiB pages.
    assert "or the GTT limit to at least 89.5 GiB" in problem
    assert "amdgpu.gttsize=91648 ttm.pages_limit=23461888" in problem


def test_no_render_node_fails(tmp_path: Path) -> None:
    result = run(node(tmp_path, render_node=False).script(), tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("preflight: render node: none in ")
    assert "modprobe amdgpu" in result.stderr


def test_no_amdgpu_in_sysfs_fails(tmp_path: Path) -> None:
    result = run(node(tmp_path, vram=None).script(), tmp_path)
    assert result.returncode == 1
    assert "preflight: amdgpu: no AMD GPU with mem_info_vram_total" in result.stderr


def test_a_short_disk_fails_and_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    fake = node(tmp_path, vram=64 * GIB, render_node=False, files=[("m.gguf", 10**16)])
    result = run(fake.script(), tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert [line.split(":")[1].strip() for line in lines[:-1]] == [
        "render node",
        "GPU memory",
        "disk",
    ]
    assert "the model needs 9313225.7 GiB more (0.0 GiB of 9313225.7 GiB already there)" in lines[2]
    assert lines[-1] == "preflight: 3 problem(s); nothing was started"


def test_files_already_on_the_volume_count_as_free(tmp_path: Path) -> None:
    fake = node(
        tmp_path,
        files=[("m-00001-of-00002.gguf", 4 * 10**12), ("m-00002-of-00002.gguf", 4 * 10**12)],
    )
    # Sparse: the size of a complete shard, and a verified one waiting for the switch.
    os.truncate(_touch(fake.volume / "m-00001-of-00002.gguf"), 4 * 10**12)
    os.truncate(_touch(fake.volume / ".m-00002-of-00002.gguf.ready"), 4 * 10**12)
    result = run(fake.script(), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the model needs 0.0 GiB more" in result.stdout


def _touch(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def test_retired_files_count_as_free_only_when_the_upgrade_replaces(tmp_path: Path) -> None:
    fake = node(tmp_path)
    stats = os.statvfs(fake.volume)
    free = stats.f_bavail * stats.f_frsize
    fake.files = [("new.gguf", free + GIB)]
    os.truncate(_touch(fake.volume / "Qwen3.6-32B-Q4_K_M.gguf"), 4 * GIB)
    keep = run(fake.script(retired=["Qwen3.6*.gguf"], replace=False), tmp_path)
    assert keep.returncode == 1 and "preflight: disk: " in keep.stderr
    replace = run(fake.script(retired=["Qwen3.6*.gguf"], replace=True), tmp_path)
    assert replace.returncode == 0, replace.stderr


def test_a_server_image_without_a_vulkan_device_fails(tmp_path: Path) -> None:
    fake = node(tmp_path, listing="Available devices:\n  (none)\n")
    result = run(fake.script(), tmp_path)
    assert result.returncode == 1
    assert (
        "preflight: Vulkan: the server image sees no Vulkan device (llama-server --list-devices: "
        "Available devices: (none)"
    ) in result.stderr


def test_device_plugin_mode_checks_sysfs_and_disk_only(tmp_path: Path) -> None:
    fake = node(tmp_path, render_node=False, listing="")
    result = run(fake.script(check_devices=False), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "render node and Vulkan device not checked" in result.stdout


def test_the_job_runs_the_script_once_in_the_server_image_on_the_node(tmp_path: Path) -> None:
    # The builder takes the inputs as the store's check leaves them: with their defaults.
    given: NodePreflight = {
        "image": "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434",
        "min_gpu_memory_gib": 90,
    }
    preflight = with_defaults(given, NodePreflight)
    script = preflight_script(
        files=[("m.gguf", 1)], min_gpu_memory_bytes=90 * GIB, check_devices=True
    )
    name = preflight_job_name("models", script, preflight["image"])
    job = preflight_job(
        Meta(name, "llm", {"app": "x"}), preflight=preflight, script=script, claim_name="models",
        node_selector={"hardware": "high-memory"},
    )  # fmt: skip
    assert name.startswith("models-node-") and len(name) == len("models-node-") + 8
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"hardware": "high-memory"}
    (container,) = pod["containers"]
    assert container["image"] == preflight["image"]
    assert container["command"] == ["bash", "-c", script]
    assert container["securityContext"]["privileged"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert volumes["dev-dri"]["hostPath"]["path"] == "/dev/dri"
    plugin = preflight_job(
        Meta(name, "llm", {}), preflight={**preflight, "gpu_access": "device-plugin"},
        script=script, claim_name="models", node_selector={},
    )  # fmt: skip
    plugin_pod = plugin["spec"]["template"]["spec"]
    assert "dev-dri" not in {v["name"] for v in plugin_pod["volumes"]}
    # The device plugin's one GPU may be the running server's: the preflight never asks for it.
    assert "limits" not in plugin_pod["containers"][0]["resources"] or not any(
        k.endswith("/gpu") for k in plugin_pod["containers"][0]["resources"]["limits"]
    )
    assert plugin_pod["containers"][0]["securityContext"]["runAsNonRoot"] is True


def test_a_variant_line_lost_at_exit_is_asked_for_again(tmp_path: Path) -> None:
    # llama-server logs from a thread of its own and may exit before its `loaded CPU backend`
    # line is written: this stand-in drops it on its first two runs, as the real one sometimes
    # does under load. The third run's line is the one reported, and the plan's check applies.
    fake = node(tmp_path)
    runs = tmp_path / "runs"
    server = tmp_path / "lossy-llama-server"
    server.write_text(
        "#!/bin/sh\n"
        f"echo x >> '{runs}'\n"
        f"if [ \"$(wc -l < '{runs}')\" -ge 3 ]; then\n"
        "  echo 'I load_backend: loaded CPU backend from /app/libggml-cpu-zen4.so' >&2\n"
        "fi\n"
        "echo 'Available devices:'\n"
    )
    server.chmod(0o755)
    script = fake.script(check_devices=False, llama_server=str(server), cpu_variant="haswell")
    result = run(script, tmp_path)
    assert "llama-server loads the zen4 CPU variant" in result.stdout, result.stdout
    assert runs.read_text().count("x") == 3
    assert "CPU: llama-server loads the zen4 CPU variant on this node, the memory plan counts " \
        "on haswell" in result.stderr  # fmt: skip
