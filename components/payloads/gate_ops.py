"""Op-level degradation: every log line where llama.cpp b11434 turns a feature off or falls back.

Standard library only; read by the gate (``gpu_gate.evaluate``) and, as ``grep -E`` patterns, by
the startupProbe's shell (``components/llamacpp/gate.py``): one table, two readers, one text.

A load can offload every layer and still run degraded: a backend that lacks an op makes
llama.cpp switch a fused op off (then the unfused graph runs, e.g. dense attention with a much
larger compute buffer: DeepSeek-V4's indexer, ggml-org/llama.cpp#25468) or run the op elsewhere
(the CPU). llama.cpp says so in the log; ``DEGRADATIONS`` holds each such message of the pinned
sources (``src/``, ``common/``, ``tools/server/``, ``ggml/src/`` of the backends a runtime here can
load: Vulkan, ROCm/CUDA, CPU, RPC), with its source line.

Left out on purpose (they do not mean the backend degraded the serving graph):

* informational lines: ``resolve_fused_ops: <op> enabled`` (src/llama-context.cpp:555),
  ``backend <lib> is not supported on this system`` (ggml/src/ggml-backend-reg.cpp:232, the CPU
  variants a ``GGML_BACKEND_DL`` image probes), ``skipping device ... with the same id``
  (src/llama.cpp:248), ``preserve_reasoning kwarg: not supported by template``;
* a tensor moved between host buffer types (``CPU_REPACK`` to ``CPU``): the ``benign`` pattern of
  the entry that reads src/llama-model-loader.cpp:1404;
* model-inherent switches no runtime changes: Grok's flash attention (src/llama-context.cpp:3820),
  Phi-3's SWA (src/models/phi3.cpp:16); the server's model/context capabilities: ctx_shift,
  cache_reuse, swa_full, speculative decoding (tools/server/server-context.cpp:1309-1375);
* operator switches: ``LLAMA_GRAPH_REUSE_DISABLE`` (src/llama-context.cpp:287),
  ``LLAMA_ATTN_ROT_DISABLE`` (src/llama-kv-cache.cpp:318), ``--cache-idle-slots`` without
  ``--cache-ram`` (tools/server/server-context.cpp:1555);
* the load path only (mmap, buffered I/O, async uploads: src/llama-mmap.cpp:191/293,
  src/llama-model-loader.cpp:830/1100/1554);
* fatal ones: the server exits or aborts (quantized V cache without flash attention, K/V types
  that differ, ``ggml_vulkan: Error: Missing op``, CUDA ``op not supported`` then GGML_ASSERT,
  ``does not support 16-bit storage``): the health check or the first decode fails instead;
* backends no runtime here loads: Metal, SYCL, OpenCL, CANN, Hexagon, OpenVINO, zDNN, ET,
  virtgpu, KleidiAI, SpacemiT.

Every pattern is a POSIX ERE that Python's ``re`` reads the same way (no ``\\d``, ``\\s``,
``(?:``, ``{``, anchors), matched against the message without the ``--log-prefix`` /
``--log-timestamps`` prefix, which the shell strips with ``PREFIX_SED``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX_SED = (
    r"s/^[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*[[:space:]][[:space:]]*//;"
    r"s/^[IWEDT][[:space:]][[:space:]]*//"
)
"""sed (BRE) that strips the timestamp and level letter, as ``gate_log.LINE_PREFIX`` does."""

_OTHER_RUNTIME = (
    "use a runtime whose backend implements it (server.runtime: the ROCm or Vulkan image, or "
    "another build)"
)


@dataclass(frozen=True)
class Degradation:
    """One llama.cpp log message that means a feature was turned off or an op fell back."""

    key: str
    """Short name (fixtures are named after it)."""
    source: str
    """Where llama.cpp b11434 prints it: ``<relative path>:<line>``."""
    format: str
    """The exact format string of the source."""
    pattern: str
    """POSIX ERE (and Python regex) matching the message."""
    what: str
    """The op or feature it names, as the finding says it."""
    cause: str
    """The likely cause and what to do."""
    benign: str = ""
    """ERE: a matching message that also matches this is informational."""
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    benign_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))
        object.__setattr__(self, "benign_regex", re.compile(self.benign) if self.benign else None)

    def matches(self, message: str) -> bool:
        """Whether a log message (prefix stripped) is this degradation."""
        if not self.regex.search(message):
            return False
        return self.benign_regex is None or not self.benign_regex.search(message)

    def finding_parts(self) -> tuple[str, str]:
        """The finding's text before and after the quoted log message (shared with the probe)."""
        return (
            f"{self.what}: '",
            f"' (llama.cpp b11434 {self.source}); likely cause: {self.cause}",
        )

    def finding(self, message: str) -> str:
        """One line: the op or feature, the log message, its source and the likely cause."""
        before, after = self.finding_parts()
        return before + message + after


DEGRADATIONS: tuple[Degradation, ...] = (
    # llama.cpp b11434 src/llama-context.cpp:539
    Degradation(
        "fused-op-elsewhere",
        "src/llama-context.cpp:539",
        "%s: layer %d is assigned to device %s but %s is assigned to device %s "
        "(usually due to missing support)\n",
        r"layer [0-9]+ is assigned to device [^ ]+ but .+ is assigned to device [^ ]+ "
        r"\(usually due to missing support\)",
        "a fused op (named in the line) runs on another device than its layer",
        "the layer's device has no kernel for it (with this model's shapes or KV cache type), "
        f"so the scheduler moved it, usually to the CPU; {_OTHER_RUNTIME}",
    ),
    # llama.cpp b11434 src/llama-context.cpp:552
    Degradation(
        "fused-op-disabled",
        "src/llama-context.cpp:552",
        "%s: %s not supported, set to disabled\n",
        r"resolve_fused_ops: .+ not supported, set to disabled",
        "a fused op (Flash Attention, a fused DeepSeek V4 HC op, ...) was switched off",
        "its probe landed on another device than the layer (the line before names it): the "
        "unfused graph runs instead, slower and with a larger compute buffer (dense attention: "
        f"ggml-org/llama.cpp#25468); {_OTHER_RUNTIME}",
    ),
    # llama.cpp b11434 src/llama-context.cpp:680
    Degradation(
        "pipeline-parallel-off",
        "src/llama-context.cpp:680",
        "%s: compute buffer allocation failed, retrying without pipeline parallelism\n",
        r"compute buffer allocation failed, retrying without pipeline parallelism",
        "pipeline parallelism across devices",
        "the devices had too little free memory for its compute buffers; lower -c or -ub, or "
        "free device memory",
    ),
    # llama.cpp b11434 src/llama-context.cpp:1294
    Degradation(
        "backend-sampling-split-tensor",
        "src/llama-context.cpp:1294",
        "%s: backend sampling not supported with SPLIT_MODE_TENSOR; using CPU\n",
        r"backend sampling not supported with SPLIT_MODE_TENSOR; using CPU",
        "backend sampling (on the CPU instead)",
        "--backend-sampling with --split-mode tensor, which b11434 cannot combine; drop one",
    ),
    # llama.cpp b11434 src/llama-context.cpp:1323
    Degradation(
        "sampler-not-offloaded",
        "src/llama-context.cpp:1323",
        "%s: sampler '%s' for seq_id = %d, cannot be offloaded to the backend\n",
        r"sampler '[^']*' for seq_id = [0-9-]+, cannot be offloaded to the backend",
        "backend sampling (this sampler chain runs on the CPU)",
        "a sampler in the chain has no backend implementation; drop it from --samplers or "
        "--backend-sampling",
    ),
    # llama.cpp b11434 src/llama-model-loader.cpp:1404
    Degradation(
        "weights-moved-to-host",
        "src/llama-model-loader.cpp:1404",
        "%s: tensor '%s' (%s) (and %zu others) cannot be used with preferred buffer type %s, "
        "using %s instead\n",
        r"tensor '[^']*' \([^)]*\) \(and [0-9]+ others\) cannot be used with preferred buffer "
        r"type [^ ]+, using [^ ]+ instead",
        "weights of the named type left the device (their ops are not supported there)",
        "the device's backend has no kernel for this weight type (e.g. an IQ quant): those "
        f"weights and their ops run from host memory; {_OTHER_RUNTIME}, or another quant",
        benign=r"preferred buffer type (CPU[^ ]*|[^ ]*_Host), using",
    ),
    # llama.cpp b11434 src/models/minimax-m3.cpp:241
    Degradation(
        "msa-dense-no-flash-attn",
        "src/models/minimax-m3.cpp:241",
        "%s: flash attention disabled; MSA requires it -> running DENSE attention (output may "
        "be degraded). Enable flash attention for MSA.\n",
        r"flash attention disabled; MSA requires it -> running DENSE attention",
        "MiniMax sparse attention (dense attention instead)",
        "flash attention is off: configured off, or resolved to disabled because the device "
        f"lacks it (see a 'not supported, set to disabled' line); set -fa on and {_OTHER_RUNTIME}",
    ),
    # llama.cpp b11434 src/models/minimax-m3.cpp:247
    Degradation(
        "msa-dense-unified-kv",
        "src/models/minimax-m3.cpp:247",
        "%s: unified KV cache with n_seq_max > 1; MSA needs per-sequence streams -> running "
        "DENSE attention. Output may be degraded. Drop --kv-unified to enable MSA.\n",
        r"unified KV cache with n_seq_max > 1; MSA needs per-sequence streams -> running DENSE "
        r"attention",
        "MiniMax sparse attention (dense attention instead)",
        "--kv-unified with more than one slot; drop --kv-unified",
    ),
    # llama.cpp b11434 common/fit.cpp:124
    Degradation(
        "fit-skips-device",
        "common/fit.cpp:124",
        "%s: device %s did not report memory; --fit will not use it\n",
        r"device [^ ]+ did not report memory; --fit will not use it",
        "a GPU left out of the memory fit (no layers placed on it by -fit)",
        "its driver reports no memory (0/0): the driver or the runtime image does not support "
        "the memory query on this device; set -ngl explicitly or use another runtime",
    ),
    # llama.cpp b11434 ggml/src/ggml-backend.cpp:1043 (debug builds only: #ifndef NDEBUG)
    Degradation(
        "op-weight-copied",
        "ggml/src/ggml-backend.cpp:1043",
        "%s: warning: no backend supports op %s with a weight with buffer type %s used in "
        "tensor %s, the weight will need to be copied\n",
        r"no backend supports op [^ ]+ with a weight with buffer type [^ ]+ used in tensor "
        r"[^ ]+, the weight will need to be copied",
        "an op on weights (named in the line) runs away from them, copying them each pass",
        f"the weight's device has no kernel for the op; {_OTHER_RUNTIME}",
    ),
    # llama.cpp b11434 ggml/src/ggml-backend-reg.cpp:134 (builds that link Vulkan statically)
    Degradation(
        "vulkan-disabled-env",
        "ggml/src/ggml-backend-reg.cpp:134",
        "Vulkan backend disabled by GGML_DISABLE_VULKAN environment variable\n",
        r"Vulkan backend disabled by GGML_DISABLE_VULKAN environment variable",
        "the Vulkan backend",
        "GGML_DISABLE_VULKAN is set in the container's environment; unset it",
    ),
    # llama.cpp b11434 ggml/src/ggml-vulkan/ggml-vulkan.cpp:5294 and :5409 (same message)
    Degradation(
        "vulkan-no-devices",
        "ggml/src/ggml-vulkan/ggml-vulkan.cpp:5294",
        "ggml_vulkan: No devices found.\n",
        r"ggml_vulkan: No devices found\.",
        "the Vulkan backend (no device: everything runs on the CPU)",
        "the container sees no Vulkan device: /dev/dri not mounted or not readable (render "
        "group), no ICD for it in the image, or GGML_VK_VISIBLE_DEVICES hides it",
    ),
    # llama.cpp b11434 ggml/src/ggml-vulkan/ggml-vulkan.cpp:13101
    Degradation(
        "vulkan-pinned-memory",
        "ggml/src/ggml-vulkan/ggml-vulkan.cpp:13101",
        "ggml_vulkan: Failed to allocate pinned memory (%s)\n",
        r"ggml_vulkan: Failed to allocate pinned memory",
        "Vulkan pinned host memory (plain CPU memory instead: slower host-device copies)",
        "the driver refused host-visible memory of that size (a locked-memory limit, or the "
        "GTT/UMA carve-out too small); raise the limit or lower -c / -ub",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:226
    Degradation(
        "cuda-init-failed",
        "ggml/src/ggml-cuda/ggml-cuda.cu:226",
        '%s: failed to initialize " GGML_CUDA_NAME ": %s\n',
        r"ggml_cuda_init: failed to initialize (CUDA|ROCm|MUSA): ",
        "the ROCm/CUDA backend (no device: everything runs on the CPU)",
        "the runtime cannot open the GPU: /dev/kfd or /dev/dri not mounted or not readable "
        "(video/render groups), or the image's ROCm does not support this GPU (gfx target)",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:158
    Degradation(
        "hip-managed-memory",
        "ggml/src/ggml-cuda/ggml-cuda.cu:158",
        "hipMallocManaged unsupported, falling back to hipMalloc.\n",
        r"hipMallocManaged unsupported, falling back to hipMalloc\.",
        "ROCm unified (managed) memory, asked by GGML_CUDA_ENABLE_UNIFIED_MEMORY",
        "the driver or kernel does not support managed memory on this GPU: allocations are "
        "limited to the VRAM carve-out; enable HMM/XNACK or unset the variable and size -ngl",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/fattn.cu:505
    Degradation(
        "cuda-fa-kv-types",
        "ggml/src/ggml-cuda/fattn.cu:505",
        "%s: no FlashAttention vector kernel compiled for K/V types %s-%s, converting K and V "
        'to f16 instead (slow). Add "%s-%s" to GGML_CUDA_FA_QUANTS to compile it.\n',
        r"no FlashAttention vector kernel compiled for K/V types [^ ]+, converting K and V to "
        r"f16 instead \(slow\)",
        "flash attention on the KV cache type (K and V converted to f16 on every step)",
        "the build has no kernel for this K/V type pair; use a KV cache type it has (f16, "
        "q8_0) or a build with GGML_CUDA_FA_QUANTS naming it",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:370
    Degradation(
        "cuda-no-tensor-cores",
        "ggml/src/ggml-cuda/ggml-cuda.cu:370",
        "The following devices will have suboptimal performance due to a lack of tensor cores:\n",
        r"The following devices will have suboptimal performance due to a lack of tensor cores:",
        "matrix multiplication on tensor cores",
        "the build targets an architecture whose kernels this device cannot run fast; use a "
        "build for its architecture",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:1167
    Degradation(
        "allreduce-internal-failed",
        "ggml/src/ggml-cuda/ggml-cuda.cu:1167",
        "internal AllReduce init failed (n_devices != 2?); falling back to meta-backend "
        "butterfly\n",
        r"internal AllReduce init failed \(n_devices != 2\?\); falling back to meta-backend "
        r"butterfly",
        "the internal AllReduce of tensor parallelism",
        "it serves exactly two devices; split over two, or build with NCCL",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:1177
    Degradation(
        "nccl-virtual-devices",
        "ggml/src/ggml-cuda/ggml-cuda.cu:1177",
        "NCCL disabled: virtual devices in use; falling back to internal AllReduce\n",
        r"NCCL disabled: virtual devices in use; falling back to internal AllReduce",
        "NCCL AllReduce of tensor parallelism",
        "GGML_CUDA_DEVICES emulates virtual devices; unset it",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:1192
    Degradation(
        "nccl-init-failed",
        "ggml/src/ggml-cuda/ggml-cuda.cu:1192",
        "NCCL init failed (%s); falling back to internal AllReduce\n",
        r"NCCL init failed \(.*\); falling back to internal AllReduce",
        "NCCL AllReduce of tensor parallelism",
        "NCCL/RCCL could not start (the error is in the line): shared memory (/dev/shm) too "
        "small, or the GPUs cannot reach each other",
    ),
    # llama.cpp b11434 ggml/src/ggml-cuda/ggml-cuda.cu:1196
    Degradation(
        "nccl-not-compiled",
        "ggml/src/ggml-cuda/ggml-cuda.cu:1196",
        "NCCL not compiled in; falling back to internal AllReduce.  Recompile with "
        "-DGGML_CUDA_NCCL=ON for best multi-GPU performance.\n",
        r"NCCL not compiled in; falling back to internal AllReduce\.",
        "NCCL AllReduce of tensor parallelism",
        "the build lacks NCCL; use a build with -DGGML_CUDA_NCCL=ON",
    ),
    # llama.cpp b11434 common/sampling.cpp:420
    Degradation(
        "backend-sampling-grammar",
        "common/sampling.cpp:420",
        "%s: backend sampling is not compatible with grammar, disabling\n",
        r"backend sampling is not compatible with grammar, disabling",
        "backend sampling (on the CPU for requests with a grammar)",
        "--backend-sampling with a grammar (request or --grammar); b11434 cannot combine them",
    ),
    # llama.cpp b11434 common/sampling.cpp:426
    Degradation(
        "backend-sampling-reasoning-budget",
        "common/sampling.cpp:426",
        "%s: backend sampling is not compatible with reasoning budget, disabling\n",
        r"backend sampling is not compatible with reasoning budget, disabling",
        "backend sampling (on the CPU with a reasoning budget)",
        "--backend-sampling with --reasoning-budget; b11434 cannot combine them",
    ),
)

ANY_DEGRADATION = "|".join(f"({d.pattern})" for d in DEGRADATIONS)
"""One ERE for every entry: the probe's single pass over the log before the per-entry ones."""
_ANY = re.compile(ANY_DEGRADATION)


def is_degraded(message: str) -> bool:
    """Whether a log message (prefix stripped) is any entry of the table."""
    return bool(_ANY.search(message)) and any(d.matches(message) for d in DEGRADATIONS)


def degradation_findings(messages: list[str]) -> list[str]:
    """One line per distinct degraded message, by table order, then by first appearance."""
    hits = list(dict.fromkeys(m for m in messages if _ANY.search(m)))
    return [d.finding(m) for d in DEGRADATIONS for m in hits if d.matches(m)]
