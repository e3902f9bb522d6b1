"""Pure builders of the node preflight: a Job on the server's node that checks it before the fetch.

A Strix Halo node can be wrong in ways found out only hours into an 87 GiB download, or never
(a server that silently runs on the CPU): the BIOS gives the GPU too little memory, the amdgpu
GTT limit is low, there is no render node, the server image sees no Vulkan device, the disk
under the volume is short. The script checks all of them in the server image, reports every
problem with its numbers and the setting to change, in the MI300X host preflight's shape
(`preflight: ...` lines, then `preflight: N problem(s); nothing was started`), and exits 1.
"""

import hashlib
import shlex
from typing import Any

from components.k8s.metadata import Meta, object_head
from components.k8s.network_policies import isolating_policy
from components.k8s.pod_security import (
    DEFAULT_UID,
    PRIVILEGED_SKIPS,
    SCRATCH_MOUNT,
    checkov_skips,
    dri_mount,
    dri_volume,
    gpu_container,
    image_skips,
    restricted_pod,
    scratch_mount,
    scratch_volume,
)
from components.model_store.inputs import MODELS_MOUNT, NodePreflight
from components.payloads.fetcher import ModelFile

LLAMA_SERVER = "/app/llama-server"
"""llama-server in the ggml-org server images (their entrypoint)."""
SYSFS_DRM = "/sys/class/drm"
"""Where amdgpu publishes `mem_info_vram_total` and `mem_info_gtt_total` of each card."""
AMD_VENDOR = "0x1002"
# Image pull (the server image is ~2 GB) plus the checks themselves, which take seconds.
PREFLIGHT_DEADLINE_S = 900
GIB = 1 << 30


def _gib_text(count: int) -> str:
    return f"{count / GIB:.1f} GiB"


def preflight_script(
    *,
    files: list[tuple[str, int]],
    min_gpu_memory_bytes: int | None,
    check_devices: bool,
    retired: list[str] | None = None,
    replace: bool = False,
    volume: str = MODELS_MOUNT,
    dri: str = "/dev/dri",
    sysfs_drm: str = SYSFS_DRM,
    llama_server: str = LLAMA_SERVER,
    cpu_variant: str | None = None,
    cpuinfo: str = "/proc/cpuinfo",
) -> str:
    """The bash script: render node, amdgpu VRAM + GTT, disk, Vulkan device, the CPU variant
    llama-server loads (its repack buffers depend on it); exit 1 on a problem.

    `files` are the model's (name, size); what of them is already on the volume counts as
    free. `retired` files count as free only with `replace` (with `keep` they stay until the
    new model is verified). The paths are parameters so tests can point them at fake trees.
    """
    model_bytes = sum(size for _, size in files)
    lines = [
        "#!/usr/bin/env bash",
        "# llm-infra node preflight: the GPU, its memory and the disk, before the model download.",
        "set -uo pipefail",
        "problems=0",
        'problem() { echo "preflight: $*" >&2; problems=$((problems + 1)); }',
        "gib() { printf '%d.%d GiB' $(($1 / 1073741824)) $(($1 % 1073741824 * 10 / 1073741824)); }",
        "ceil_div() { echo $((($1 + $2 - 1) / $2)); }",
        'size_of() { stat -c %s "$1" 2>/dev/null || echo 0; }',
        f"drm={shlex.quote(sysfs_drm)}",
        f"volume={shlex.quote(volume)}",
    ]
    if check_devices:
        lines += [
            f"dri={shlex.quote(dri)}",
            f"llama_server={shlex.quote(llama_server)}",
            'nodes=""',
            'for node in "$dri"/renderD*; do',
            '  if [ -c "$node" ]; then nodes="$nodes ${node##*/}"; fi',
            "done",
            'if [ -z "$nodes" ]; then',
            '  problem "render node: none in $dri (renderD*): load amdgpu on the node (modprobe'
            " amdgpu; dmesg | grep amdgpu) and give the pod the host's $dri"
            ' (server.gpuAccess: privileged)"',
            "else",
            '  echo "preflight: render node(s):$nodes"',
            "fi",
        ]
    else:
        lines.append(
            'echo "preflight: render node and Vulkan device not checked (server.gpuAccess:'
            ' device-plugin hands the GPU to the server only)"'
        )
    lines += [
        'vram=""',
        'gtt=""',
        'card=""',
        'for dev in "$drm"/card*/device; do',
        '  [ -r "$dev/mem_info_vram_total" ] || continue',
        '  vendor=""',
        '  read -r vendor <"$dev/vendor" 2>/dev/null || true',
        f'  [ "$vendor" = {AMD_VENDOR} ] || continue',
        '  read -r vram <"$dev/mem_info_vram_total" 2>/dev/null || vram=""',
        '  read -r gtt <"$dev/mem_info_gtt_total" 2>/dev/null || gtt=""',
        "  card=${dev%/device}",
        "  card=${card##*/}",
        "  break",
        "done",
        "if ! [[ $vram =~ ^[0-9]+$ && $gtt =~ ^[0-9]+$ ]]; then",
        '  problem "amdgpu: no AMD GPU with mem_info_vram_total and mem_info_gtt_total under'
        ' $drm: the amdgpu kernel driver is not bound to the GPU (lspci -k)"',
        "else",
        '  echo "preflight: $card VRAM $(gib "$vram") (BIOS UMA frame buffer), GTT $(gib "$gtt")'
        ' (amdgpu.gttsize / ttm.pages_limit)"',
    ]
    if min_gpu_memory_bytes is not None:
        need_gib = f"{min_gpu_memory_bytes / GIB:g}"
        lines += [
            f"  need={min_gpu_memory_bytes}",
            "  total=$((vram + gtt))",
            '  if [ "$total" -lt "$need" ]; then',
            "    short=$((need - vram))",
            '    problem "GPU memory: VRAM $(gib "$vram") + GTT $(gib "$gtt") = $(gib "$total"),'
            f" the plan counts on {need_gib} GiB (memory.vramGib): raise the BIOS UMA frame buffer"
            ' (UMA split) to at least $(gib "$need"), or the GTT limit to at least'
            ' $(gib "$short") (kernel command line: amdgpu.gttsize=$(ceil_div "$short" 1048576)'
            ' ttm.pages_limit=$(ceil_div "$short" 4096)), or lower memory.vramGib to at most'
            ' $((total / 1073741824)) and let the plan check the fit"',
            "  fi",
        ]
    lines += ["fi"]
    lines += [
        f"model={model_bytes}",
        "have=0",
    ]
    for name, size in files:
        kept = f"{shlex.quote(name)} {shlex.quote(f'.{name}.ready')}"
        lines += [
            f"for kept in {kept}; do",
            f'  if [ "$(size_of "$volume/$kept")" = {size} ]; then',
            f"    have=$((have + {size}))",
            "    break",
            "  fi",
            "done",
        ]
    reclaimable = replace and bool(retired)
    lines.append("reclaim=0")
    if reclaimable:
        names = " ".join(shlex.quote(name) for name, _ in files)
        patterns = " ".join(shlex.quote(pattern) for pattern in retired or [])
        lines += [
            f"locked=({names})",
            f"retired=({patterns})",
            'for pattern in "${retired[@]}"; do',
            '  for old in "$volume"/$pattern; do',
            '    [ -f "$old" ] || continue',
            '    case " ${locked[*]} " in *" ${old##*/} "*) continue ;; esac',
            '    reclaim=$((reclaim + $(size_of "$old")))',
            "  done",
            "done",
        ]
    lines += [
        "read -r blocks block_size < <(stat -f -c '%a %S' \"$volume\" 2>/dev/null || echo 0 0)",
        "free=$((blocks * block_size))",
        "need_disk=$((model - have))",
        'if [ "$need_disk" -gt $((free + reclaim)) ]; then',
        '  problem "disk: $(gib "$free") free where the volume lives ($volume)'
        + (', $(gib "$reclaim") in retired files (store.upgrade: replace)' if reclaimable else "")
        + ', the model needs $(gib "$need_disk") more ($(gib "$have") of $(gib "$model") already'
        " there): free space on the node's disk (k3s local-path keeps volumes under"
        ' /var/lib/rancher/k3s/storage) or move the volume (store.storageClass)"',
        "else",
        '  echo "preflight: disk $(gib "$free") free, the model needs $(gib "$need_disk") more"',
        "fi",
    ]
    if check_devices:
        lines += [
            'if [ ! -x "$llama_server" ]; then',
            '  problem "Vulkan: $llama_server is not in the server image (server.image)"',
            "else",
            '  devices=$(timeout 60 "$llama_server" --list-devices 2>&1)',
            '  vulkan=$(printf "%s\\n" "$devices" | grep -E "^ +Vulkan[0-9]+: " || true)',
            '  if [ -z "$vulkan" ]; then',
            '    listed=$(printf "%s" "$devices" | tr -s "\\n " "  ")',
            '    problem "Vulkan: the server image sees no Vulkan device (llama-server'
            " --list-devices: ${listed:0:300}): give the pod the render node (server.gpuAccess),"
            " check the node's amdgpu driver, and use a Vulkan build of the server"
            ' (server.image: ...:server-vulkan-bNNNNN)"',
            "  else",
            '    while read -r line; do echo "preflight: llama-server sees $line"; done'
            ' <<<"$vulkan"',
            "  fi",
            "fi",
        ]
    # ggml loads the best CPU variant the node supports and logs which (`load_backend: loaded
    # CPU backend from .../libggml-cpu-<variant>.so`, ggml-backend-reg.cpp line 259, b11434).
    lines += [
        f"cpuinfo={shlex.quote(cpuinfo)}",
        "flags=$(grep -m1 '^flags' \"$cpuinfo\" 2>/dev/null | tr ' ' '\\n'"
        " | grep -xE 'avx2|avx512f|avx512_vnni|avx512_bf16|avx_vnni|amx_int8|amx_tile'"
        " | tr '\\n' ' ' || true)",
        f"llama_server={shlex.quote(llama_server)}",
        'variant=""',
        # llama-server logs from a thread of its own and may exit before the line is written
        # (about 1 run in 150 on a busy 2-core machine): a missing line is asked for again.
        'if [ -x "$llama_server" ]; then',
        "  for _ in 1 2 3; do",
        '    variant=$(timeout 60 "$llama_server" -lv 4 --list-devices 2>&1'
        " | sed -n 's|.*loaded CPU backend from .*libggml-cpu-\\([a-z0-9_.]*\\)\\.so.*|\\1|p'"
        " | head -n 1)",
        '    [ -z "$variant" ] || break',
        "  done",
        "fi",
        'echo "preflight: CPU features ${flags:-(none of avx2 avx512 amx)}; llama-server loads'
        ' the ${variant:-unknown} CPU variant"',
    ]
    if cpu_variant is not None:
        lines += [
            f"expected={shlex.quote(cpu_variant)}",
            'if [ -n "$variant" ] && [ "$variant" != "$expected" ]; then',
            '  problem "CPU: llama-server loads the $variant CPU variant on this node, the memory'
            " plan counts on $expected (memory.nodeCpu), whose repack buffers for CPU-resident"
            ' weights differ: set memory.nodeCpu: $variant"',
            "fi",
        ]
    lines += [
        'if [ "$problems" -gt 0 ]; then',
        '  echo "preflight: $problems problem(s); nothing was started" >&2',
        "  exit 1",
        "fi",
        'echo "preflight: ok"',
    ]
    return "\n".join(lines) + "\n"


def preflight_job_name(store_name: str, script: str, image: str) -> str:
    """`<store>-node-<digest>`: a change of the checks or the image runs them again."""
    digest = hashlib.sha256((image + "\n" + script).encode()).hexdigest()
    return f"{store_name}-node-{digest[:8]}"


def preflight_job(
    meta: Meta,
    *,
    preflight: NodePreflight,
    script: str,
    claim_name: str,
    node_selector: dict[str, str],
    run_as_user: int = DEFAULT_UID,
) -> dict[str, Any]:
    """The preflight Job: once, on the server's node, in the server image; no retries."""
    access = preflight["gpu_access"]
    image = preflight["image"]
    mounts = [{"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True}, scratch_mount()]
    volumes: list[dict[str, Any]] = [
        {"name": "models", "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True}},
        scratch_volume(),
    ]
    skips = image_skips(image)
    if access == "privileged":
        mounts.append(dri_mount())
        volumes.append(dri_volume(preflight["gpu_device_path"]))
        skips += PRIVILEGED_SKIPS
    return {
        **object_head("batch/v1", "Job", meta, checkov_skips(skips)),
        "spec": {
            # The node's facts do not change on a retry: fail once, with the numbers.
            "backoffLimit": 0,
            "activeDeadlineSeconds": PREFLIGHT_DEADLINE_S,
            "template": {
                "metadata": {"labels": preflight_pod_labels(meta.labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": node_selector,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": restricted_pod(),
                    "containers": [
                        {
                            "name": "preflight",
                            "image": image,
                            "command": ["bash", "-c", script],
                            "env": [
                                {"name": "HOME", "value": SCRATCH_MOUNT},
                                {
                                    "name": "MESA_SHADER_CACHE_DIR",
                                    "value": f"{SCRATCH_MOUNT}/mesa-shader-cache",
                                },
                            ],
                            "securityContext": gpu_container(access, run_as_user),
                            "volumeMounts": mounts,
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "64Mi"},
                                "limits": {"cpu": "1000m", "memory": "512Mi"},
                            },
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }


def store_preflight_job(
    store: Meta,
    preflight: NodePreflight,
    *,
    files: list[ModelFile],
    retired: list[str],
    upgrade: str,
    claim_name: str,
    node_selector: dict[str, str],
    run_as_user: int = DEFAULT_UID,
) -> dict[str, Any]:
    """The preflight Job of a GgufModelStore (`store` is its name, namespace and labels): its
    files, retired patterns and upgrade mode."""
    need_gib = preflight.get("min_gpu_memory_gib")
    script = preflight_script(
        files=[(f["name"], f.get("size") or 0) for f in files],
        min_gpu_memory_bytes=None if need_gib is None else int(need_gib * GIB),
        check_devices=preflight["gpu_access"] == "privileged",
        retired=retired,
        replace=upgrade == "replace",
        cpu_variant=preflight.get("cpu_variant"),
    )
    return preflight_job(
        store.named(preflight_job_name(store.name, script, preflight["image"])),
        preflight=preflight,
        script=script,
        claim_name=claim_name,
        node_selector=node_selector,
        run_as_user=run_as_user,
    )


def preflight_pod_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels of the preflight pod (its NetworkPolicy selects them)."""
    return {**labels, "app.kubernetes.io/component": "preflight"}


def preflight_network_policy(meta: Meta) -> dict[str, Any]:
    """The preflight pod talks to no one: no ingress, no egress (it reads sysfs and the disk)."""
    return isolating_policy(meta, preflight_pod_labels(meta.labels))
