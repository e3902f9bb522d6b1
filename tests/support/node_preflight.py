"""A fake node for the node preflight script: amdgpu sysfs, render nodes, a model volume and
the server image's llama-server, and the script run by bash against it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from components.model_store.node_preflight import preflight_script

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
