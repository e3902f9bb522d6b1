"""llama.cpp runtimes: what runs llama-server, and everything that choice implies.

A runtime is a named image of one llama.cpp build with its backend (`vulkan`, `rocm`, `cpu`)
and the capabilities it declares (`rpc`). The backend decides the host devices the container
needs, its environment, the device names llama-server logs (which the GPU gate and the memory
plan read) and which compute-buffer estimate the plan can stand behind. Checks go by what a
runtime declares, never by how its image name is spelt.

Built in: `vulkan` (the default), `rocm` and `cpu`, the official images of the pinned build,
cut from one commit (llama.cpp b11434 .github/workflows/docker.yml: tag `server` + `-<backend>`,
none for the CPU build, + `-b<build>`). A stack file or a program may declare its own
(`Runtime.from_record`), and `llm-infra tune` records a winner in the same shape.

Standard library and the project's own plain types only: the components, the provider and the
stack file all read it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from components.images import parse_image
from components.k8s.pod_security import SCRATCH_MOUNT
from components.payloads.gpu_gate import BACKEND_DEVICE_PREFIX

Backend = Literal["vulkan", "rocm", "cpu"]
BACKENDS: tuple[str, ...] = get_args(Backend)
Capability = Literal["rpc"]
RPC: Capability = "rpc"
"""The build is configured with -DGGML_RPC: llama-server takes `--rpc`, and the image holds
rpc-server (b11434's images of every backend configure without it: llama-server answers `--rpc`
with "RPC not supported in this build")."""
CAPABILITIES: tuple[str, ...] = get_args(Capability)
ComputeEstimate = Literal["vulkan", "cpu", "upper-bound"]

PINNED_BUILD = "b11434"
OFFICIAL_REPOSITORY = "ghcr.io/ggml-org/llama.cpp"
REPOSITORY_CAPABILITIES: dict[str, frozenset[str]] = {OFFICIAL_REPOSITORY: frozenset()}
"""What every image of a known repository can do, at any tag or digest."""
CUSTOM_IMAGE_CAPABILITIES = frozenset({RPC})
"""An image from another repository given as a built-in runtime's image (`server.image`) is a
custom build of that backend, taken to declare `rpc` as it was before runtimes existed (the
reason to build one); a runtime declared in full says exactly what its build has."""

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_RECORD_KEYS = ("name", "image", "backend", "capabilities", "digest")


@dataclass(frozen=True)
class BackendTraits:
    """What a backend needs from the pod and what its load log says."""

    devices: tuple[str, ...]
    """Host device paths the container opens (mounted in `privileged` GPU access; a device
    plugin hands them over otherwise)."""
    env: tuple[tuple[str, str], ...]
    """Environment of the llama-server container, beside HOME."""
    device_prefix: str | None
    """Device names in llama-server's load log (`Vulkan0`, `ROCm0`); None: no GPU, every
    layer on the host."""
    compute_estimate: ComputeEstimate
    """`vulkan`: the compute buffers measured through Vulkan (infra/plan/llamacpp.py
    `vulkan_compute_bytes`); `cpu`: the CPU build's buffer as measured (`cpu_compute_bytes`,
    llama-style attention with flash attention; the upper bound otherwise); `upper-bound`:
    `compute_buffer_bytes`, for a GPU an assumption the plan says aloud."""
    groups: str
    """Who may open the devices: what a non-root pod needs (`server.renderGroupId`)."""
    cmake: str
    """The llama.cpp CMake option of the backend (what a custom build configures)."""
    tag: str
    """The official server image's tag before `-bNNNN`."""


BACKEND_TRAITS: dict[str, BackendTraits] = {
    "vulkan": BackendTraits(
        devices=("/dev/dri",),
        # Mesa writes its shader cache under HOME; the root filesystem is read-only.
        env=(("MESA_SHADER_CACHE_DIR", f"{SCRATCH_MOUNT}/mesa-shader-cache"),),
        device_prefix=BACKEND_DEVICE_PREFIX["vulkan"],
        compute_estimate="vulkan",
        groups="the render node's group (its GID, e.g. 991 on recent Ubuntu, not video 44)",
        cmake="-DGGML_VULKAN=ON",
        tag="server-vulkan",
    ),
    # ROCm opens /dev/kfd (compute dispatch) and the render nodes under /dev/dri (ROCm's
    # "Running ROCm Docker containers": --device /dev/kfd --device /dev/dri). No environment:
    # b11434's .devops/rocm.Dockerfile:37 builds native code objects for gfx1151 (Strix
    # Halo's 8060S; ROCM_DOCKER_ARCH, ROCm 7.2.1), and llama.cpp's docs/build.md:428 name
    # HSA_OVERRIDE_GFX_VERSION only for a GPU the build does not support (as gfx1152 needed it,
    # ggml-org/llama.cpp#19949); gfx1151 runs on ROCm 7.2 without it
    # (ROCm/legacy-rocm-build#5339).
    "rocm": BackendTraits(
        devices=("/dev/kfd", "/dev/dri"),
        env=(),
        device_prefix=BACKEND_DEVICE_PREFIX["rocm"],
        compute_estimate="upper-bound",
        groups="the group of /dev/kfd and the render node (`render` on recent distributions, "
        "`video` on older ones; its GID)",
        cmake="-DGGML_HIP=ON",
        tag="server-rocm",
    ),
    "cpu": BackendTraits(
        devices=(),
        env=(),
        device_prefix=BACKEND_DEVICE_PREFIX["cpu"],
        compute_estimate="cpu",
        groups="none",
        cmake="",
        tag="server",
    ),
}


@dataclass(frozen=True)
class Runtime:
    """What runs llama-server: an image of one llama.cpp build, its backend, its capabilities."""

    name: str
    image: str
    """The image reference, pinned by a build tag or a digest."""
    backend: str
    """One of BACKENDS."""
    capabilities: frozenset[str] = frozenset()
    digest: str | None = None
    """`sha256:...` the image is pinned to (`llm-infra tune` records it), or None."""

    @property
    def traits(self) -> BackendTraits:
        """Devices, environment, device names and compute estimate of its backend."""
        return BACKEND_TRAITS[self.backend]

    @property
    def pinned_image(self) -> str:
        """The reference the pod runs: `image@digest` when a digest is recorded."""
        if self.digest is None or "@" in self.image:
            return self.image
        return f"{self.image}@{self.digest}"

    @property
    def devices(self) -> tuple[str, ...]:
        """Host devices the container needs."""
        return self.traits.devices

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """Environment of the llama-server container, beside HOME."""
        return self.traits.env

    @property
    def device_prefix(self) -> str | None:
        """The device names the gate and the plan expect in the load log (None: no GPU)."""
        return self.traits.device_prefix

    @property
    def uses_gpu(self) -> bool:
        """Whether llama-server offloads layers to a GPU at all."""
        return self.traits.device_prefix is not None

    @property
    def compute_estimate(self) -> ComputeEstimate:
        """Which compute-buffer estimate the memory plan uses."""
        return self.traits.compute_estimate

    def to_record(self) -> dict[str, Any]:
        """`{name, image, backend, capabilities, digest}`: the stack file's and the tune record's
        shape."""
        return {
            "name": self.name,
            "image": self.image,
            "backend": self.backend,
            "capabilities": sorted(self.capabilities),
            "digest": self.digest,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Runtime:
        """A runtime from its record; ValueError naming each wrong field and what is allowed."""
        problems = record_problems(record)
        if problems:
            raise ValueError("; ".join(f"{key}: {message}" for key, message in problems))
        return cls(
            name=record["name"],
            image=record["image"],
            backend=record["backend"],
            capabilities=frozenset(record["capabilities"]),
            digest=record["digest"],
        )


def record_problems(record: object) -> list[tuple[str, str]]:
    """(field, what is wrong) of a runtime record, strictly: exactly its five keys (`digest`
    may be null), their types and grammars, an image pinned to a build."""
    if not isinstance(record, Mapping):
        return [("", f"{type(record).__name__} is not a mapping of {', '.join(_RECORD_KEYS)}")]
    problems = [(str(k), "unknown key") for k in record if k not in _RECORD_KEYS]
    problems += [(k, "is required") for k in _RECORD_KEYS if k not in record]
    for key in ("name", "image", "backend"):
        if key in record and not isinstance(record[key], str):
            problems.append((key, f"{record[key]!r} is not a string"))
    name, image, backend, capabilities, digest = (record.get(k) for k in _RECORD_KEYS)
    if isinstance(name, str) and not NAME.match(name):
        problems.append(("name", f"{name!r} is not a name (lowercase letters, digits and -)"))
    if isinstance(image, str):
        try:
            ref = parse_image(image)
        except ValueError as exc:
            problems.append(("image", f"{image!r} is not an image reference: {exc}"))
        else:
            if not ref.pinned and not digest:
                problems.append(
                    ("image", f"{image!r} names no build (a tag such as server-vulkan-b11434, "
                     "or a digest)")
                )  # fmt: skip
    if isinstance(backend, str) and backend not in BACKENDS:
        problems.append(("backend", f"{backend!r} is not one of {', '.join(BACKENDS)}"))
    if "capabilities" in record and (
        not isinstance(capabilities, list) or any(c not in CAPABILITIES for c in capabilities)
    ):
        problems.append(
            ("capabilities", f"{capabilities!r} is not a list of {', '.join(CAPABILITIES)}")
        )
    if digest is not None and (not isinstance(digest, str) or not _DIGEST.match(digest)):
        problems.append(("digest", f"{digest!r} is not sha256:<64 hex digits> (or null)"))
    elif (
        digest is not None
        and isinstance(image, str)
        and image.partition("@")[2] not in ("", digest)
    ):
        problems.append(("digest", f"{digest!r} is not the digest in image {image!r}"))
    return problems


def official_runtime(backend: str) -> Runtime:
    """The official server image of the pinned build for a backend."""
    tag = f"{BACKEND_TRAITS[backend].tag}-{PINNED_BUILD}"
    return Runtime(name=backend, image=f"{OFFICIAL_REPOSITORY}:{tag}", backend=backend)


BUILTIN_RUNTIMES: dict[str, Runtime] = {b: official_runtime(b) for b in BACKENDS}
"""`vulkan` (the default: `server-vulkan-b11434`), `rocm` (`server-rocm-b11434`), `cpu`
(`server-b11434`)."""
DEFAULT_RUNTIME = BUILTIN_RUNTIMES["vulkan"]

_CPU_TAG = re.compile(r"^(?:server|full|light)(?:-b\d+)?$")
_BACKEND_TAG = re.compile(r"^(?:server|full|light)-([a-z][a-z0-9]*?)(?:-b\d+)?$")


def official_backend(image: str) -> str | None:
    """The backend an official llama.cpp image's tag names (`server-rocm-b11434` → rocm), `""`
    for an official build no runtime here has (cuda, musa, ...), None when it does not say (a
    digest alone, or another repository)."""
    try:
        ref = parse_image(image)
    except ValueError:
        return None
    if ref.repository != OFFICIAL_REPOSITORY or ref.tag is None:
        return None
    if _CPU_TAG.match(ref.tag) or ref.tag.startswith("server-s390x"):
        return "cpu"
    match = _BACKEND_TAG.match(ref.tag)
    if match is None:
        return None
    return match[1] if match[1] in BACKENDS else ""


def is_builtin(runtime: Runtime) -> bool:
    """Whether a runtime is one of the built-ins exactly (its image may then be replaced)."""
    return BUILTIN_RUNTIMES.get(runtime.name) == runtime


def with_image(runtime: Runtime, image: str) -> tuple[Runtime, str | None]:
    """The runtime that runs `image` in place of `runtime`'s own, or a contradiction.

    Its own image leaves it as it is. A built-in's image may be replaced by another build of the
    same backend: an official image whose tag names another backend contradicts it; one from
    another repository is a custom build of that backend (`CUSTOM_IMAGE_CAPABILITIES`). A
    declared runtime names its own image: another one contradicts it.
    """
    if image in (runtime.image, runtime.pinned_image):
        return runtime, None
    if not is_builtin(runtime):
        return runtime, (
            f"{image!r} is not the image of runtime {runtime.name!r} ({runtime.pinned_image}): a "
            "declared runtime names its own image (set it there, in one place)"
        )
    backend = official_backend(image)
    if backend == "":
        return runtime, (
            f"{image!r} is a llama.cpp build of a backend no runtime here runs (allowed: "
            f"{', '.join(BACKENDS)})"
        )
    if backend is not None and backend != runtime.backend:
        return runtime, (
            f"{image!r} is llama.cpp's {backend} build, but the runtime is {runtime.name!r} "
            f"({runtime.backend}): choose the runtime {backend!r} (its image is this build) or "
            f"an image of the {runtime.backend} build"
        )
    try:
        repository = parse_image(image).repository
    except ValueError:
        repository = image.partition("@")[0].rsplit(":", 1)[0]
    capabilities = REPOSITORY_CAPABILITIES.get(repository, CUSTOM_IMAGE_CAPABILITIES)
    return dataclasses.replace(runtime, image=image, digest=None, capabilities=capabilities), None


def runtime_for(image: str | None, declared: Runtime | None) -> tuple[Runtime, bool, str | None]:
    """The runtime of a pod: `declared` with `image` in its place (`with_image`); with none
    declared, the built-in of the backend an official image's tag names (vulkan for any other
    image), which the image then replaces. Returns it, whether the image decided it (an error
    names the image then), and the contradiction, if any."""
    if declared is None:
        if image is None:
            return DEFAULT_RUNTIME, False, None
        base = BUILTIN_RUNTIMES.get(official_backend(image) or "", DEFAULT_RUNTIME)
        runtime, problem = with_image(base, image)
        return runtime, True, problem
    if image is None:
        return declared, False, None
    runtime, problem = with_image(declared, image)
    return runtime, runtime.pinned_image != declared.pinned_image, problem


def missing_capability(runtime: Runtime, capability: str, replaced: bool) -> str | None:
    """Why `runtime` cannot do `capability`, or None. `replaced`: its image is not the
    runtime's own (the message then names the image's build, as the image key reads it)."""
    if capability in runtime.capabilities:
        return None
    if replaced:
        return (
            f"{runtime.image!r} is built without -DGGML_RPC (llama.cpp's images answer --rpc "
            "with 'RPC not supported in this build'): use an image of the same llama.cpp build "
            f"configured with {' '.join(filter(None, (runtime.traits.cmake, '-DGGML_RPC=ON')))}"
        )
    return (
        f"{runtime.name!r} ({runtime.pinned_image}) does not declare the {capability!r} "
        "capability (llama.cpp's images are built without -DGGML_RPC and answer --rpc with 'RPC "
        "not supported in this build'): declare a runtime of a build configured with "
        "-DGGML_RPC=ON, with capabilities: [rpc]"
    )
