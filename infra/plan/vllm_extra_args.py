"""What `vllm serve` extra arguments (`server.extraArgs`) do to the vLLM memory plan.

The vLLM plan (`infra.plan.vllm`) budgets the weights, `--kv-cache-memory-bytes` and an
activation reserve in HBM, the CPU KV tier and a runtime allowance in host RAM; the program
renders every option that sets those. An extra option that changes memory otherwise (offloaded
or re-quantized weights, more GPUs, adapters, a KV connector, CUDA-graph sizes, ...) is refused
with the reason. Each option of vLLM 0.33's table (`components/vllm/vllm_serve_options.json`)
is classified once: the groups of the HTTP front end, logging and observability are neutral as
a whole; every option of a group that configures the engine is named here, neutral or not (a
unit test keeps the classes and the table equal, so a new option of a new release is never
passed unread).
"""

from __future__ import annotations

from collections.abc import Sequence

from components.extra_args import owned_spellings, parse_extra_args, vllm_serve_options
from components.option_categories import VLLM_SERVE_UNCOUNTABLE
from components.vllm.inputs import OWNED_OPTIONS, REFUSED_OPTIONS

UNCOUNTABLE = VLLM_SERVE_UNCOUNTABLE
"""Options that change memory in ways the plan cannot count, each with the reason (the one
table of refusals: `components/option_categories.py`)."""

NEUTRAL_GROUPS = frozenset(
    {"Frontend", "LoggingConfig", "ObservabilityConfig", "StructuredOutputsConfig", "options"}
)
"""Groups that configure the HTTP front end, logs and metrics: no memory the plan budgets."""

NEUTRAL: frozenset[str] = frozenset(
    {
        # ModelConfig: names, tokenization, sampling output, checks.
        "--tokenizer", "--tokenizer-mode", "--seed",
        "--allowed-media-domains", "--revision", "--code-revision",
        "--tokenizer-revision", "--allow-deprecated-quantization", "--enforce-eager",
        "--enable-return-routed-experts", "--return-sampling-mask", "--max-logprobs",
        "--logprobs-mode", "--use-fp64-gumbel", "--enable-trace-replay",
        "--disable-sliding-window", "--disable-cascade-attn", "--skip-tokenizer-init",
        "--enable-prompt-embeds", "--config-format", "--pooler-config", "--generation-config",
        "--override-generation-config", "--sleep-mode-backend", "--sleep-mode-offload-cudagraph",
        "--sleep-preserve-parameter-names", "--enable-cumem-allocator",
        "--enable-nccl-comm-suspend", "--model-impl",
        "--io-processor-plugin", "--renderer-num-workers",
        # LoadConfig: how the same bytes are read.
        "--load-format", "--download-dir", "--safetensors-load-strategy",
        "--safetensors-prefetch-num-threads", "--safetensors-prefetch-block-size",
        "--model-loader-extra-config", "--ignore-patterns", "--use-tqdm-on-load",
        "--pt-load-map-location",
        # Attention and Mamba kernels, kernel choices.
        "--attention-backend", "--mamba-backend", "--mamba-ssu-algorithm",
        "--enable-mamba-cache-stochastic-rounding", "--mamba-cache-philox-rounds",
        "--ir-op-priority", "--enable-flashinfer-autotune", "--monokernel", "--moe-backend",
        "--linear-backend", "--sparse-indexer-topk-backend",
        # ParallelConfig of one GPU: transport, timeouts, NUMA, workers.
        "--distributed-executor-backend", "--master-addr", "--master-port",
        "--distributed-timeout-seconds", "--cpu-distributed-timeout-seconds", "--numa-bind",
        "--numa-bind-nodes", "--numa-bind-cpus", "--dcp-comm-backend", "--dcp-q-replicate",
        "--dcp-kv-cache-interleave-size", "--cp-kv-cache-interleave-size",
        "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-backend",
        "--enable-hc-sp", "--enable-batch-sharded-sampling", "--enable-ep-weight-filter",
        "--all2all-backend", "--enable-shm-tensor-arena", "--dbo-decode-token-threshold",
        "--dp-sync-interval", "--dbo-prefill-token-threshold",
        "--disable-nccl-for-dp-synchronization", "--expert-placement-strategy",
        "--max-parallel-loading-workers", "--ray-workers-use-nsight",
        "--disable-custom-all-reduce",
        "--enable-fault-tolerance", "--fault-tolerance-config",
        # CacheConfig within --kv-cache-memory-bytes: how the same bytes are used.
        "--block-size", "--gpu-memory-utilization", "--prefix-caching-hash-algo",
        "--prefix-cache-retention-interval", "--kv-cache-dtype-skip-layers",
        "--kv-sharing-fast-prefill", "--swa-bounded-replay", "--prefix-match-unit",
        # MultiModalConfig that only narrows or tunes the encoder.
        "--language-model-only", "--enable-mm-embeds", "--media-io-kwargs",
        "--mm-processor-kwargs", "--mm-hasher-algorithm", "--mm-encoder-only",
        "--mm-encoder-attn-backend", "--mm-encoder-attn-dtype", "--mm-encoder-fp8-scale-path",
        "--mm-encoder-fp8-scale-save-path", "--mm-encoder-fp8-scale-save-margin",
        "--interleave-mm-strings", "--skip-mm-profiling", "--video-pruning-rate",
        "--video-pruning-method", "--mm-device-do-normalize",
        # LoRAConfig that only tunes adapters enabled above.
        "--lora-dtype", "--enable-tower-connector-lora", "--lora-target-modules",
        "--specialize-active-lora", "--enable-mixed-moe-lora-format",
        "--enable-moe-shared-loras", "--max-lora-cls-labels",
        # SchedulerConfig: order and pacing within the rendered budgets.
        "--max-num-active-seqs", "--max-num-queued-reqs", "--max-num-queued-tokens",
        "--long-prefill-token-threshold", "--long-prefill-token-threshold-adaptive",
        "--scheduling-policy", "--enable-chunked-prefill", "--disable-chunked-mm-input",
        "--scheduler-cls", "--watermark", "--prefill-schedule-interval",
        "--disable-hybrid-kv-cache-manager", "--async-scheduling", "--stream-interval",
        # VllmConfig sections of outputs, reasoning, events, kernels and profiling.
        "--watermark-config", "--kv-events-config", "--attention-config", "--reasoning-config",
        "--kernel-config", "--structured-outputs-config", "--aux-output-config",
        "--profiler-config", "--watchdog-config",
    }
)  # fmt: skip
"""Options of the engine's groups that change no memory the plan budgets."""


def vllm_extra_args_problems(words: Sequence[str], key: str = "server.extraArgs") -> list[str]:
    """Why the vLLM plan cannot count these extra words (empty when nothing it budgets moves)."""
    table = vllm_serve_options()
    owned = owned_spellings(table, OWNED_OPTIONS)
    problems = []
    for arg in parse_extra_args(words, table, owned, REFUSED_OPTIONS)[0]:
        reason = UNCOUNTABLE.get(arg.option.name)
        if reason is not None:
            problems.append(
                f"plan: {key}[{arg.index}]: {arg.spelling} changes memory the plan cannot count "
                f"({reason}): remove it, or set memory.check: false to deploy without the "
                "plan's check"
            )
    return problems
