"""Every server option the program refuses, and why: the one table of refusals, per server.

- `*_REFUSED`: refused by the component (`extra_args.parse_extra_args`), through every door (the
  stack file, Python, the provider) whatever `memory.check` says: options that open the server
  (by category: run tools or commands, serve files, load code, fetch models; no
  category has an opt-in: none has a use these deployments need, and each reason says what to
  do instead), and options that break the deployment (a secret in argv, another protocol, an
  option that exits instead of serving).
- `*_UNCOUNTABLE`: refused by the memory plan (`infra/plan/extra_args.py`,
  `infra/plan/vllm_extra_args.py`), because they change memory in ways the plan cannot count;
  `memory.check: false` lets them through.

Each entry names one spelling of an option of the pinned server's table (a unit test keeps them
there, and no option in both tables); every spelling of that option is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

REASONS: Mapping[str, str] = {
    "runs-tools": "it lets a request run tools or commands inside the container (shell, file "
    "reads and writes, MCP servers it starts or reaches)",
    "serves-files": "it reads or writes files of the container on a request's behalf",
    "loads-code": "it loads Python code (the model repo's own, or a module or file it names) "
    "into the server process",
    "fetches-models": "it downloads a model at start, past the lock's pinned files, the "
    "fetcher's checks and the memory plan",
}
"""Each category's reason, as the refusal says it."""

LLAMA_SERVER: Mapping[str, str] = {
    "--tools": "runs-tools",
    "--tools-runtime": "runs-tools",
    "--mcp-servers-config": "runs-tools",
    "--mcp-servers-json": "runs-tools",
    "--ui-mcp-proxy": "runs-tools",
    "--path": "serves-files",
    "--slot-save-path": "serves-files",
    "--media-path": "serves-files",
    "--log-prompts-dir": "serves-files",
    "--spec-draft-hf": "fetches-models",
    "--mmproj-url": "fetches-models",
}
"""llama-server b11434's options by category."""

VLLM_SERVE: Mapping[str, str] = {
    "--tool-server": "runs-tools",
    "--allowed-local-media-path": "serves-files",
    "--trust-remote-code": "loads-code",
    "--middleware": "loads-code",
    "--worker-cls": "loads-code",
    "--worker-extension-cls": "loads-code",
    "--tool-parser-plugin": "loads-code",
    "--reasoning-parser-plugin": "loads-code",
    "--logits-processors": "loads-code",
    "--log-config-file": "loads-code",
}
"""vLLM 0.33's `vllm serve` options by category."""


def refusals(categories: Mapping[str, str]) -> dict[str, str]:
    """Spelling → the reason its refusal gives, for `parse_extra_args`'s `refused`."""
    return {spelling: REASONS[category] for spelling, category in categories.items()}


LLAMA_SERVER_REFUSED: Mapping[str, str] = {
    "--hf-token": "a secret in argv is visible in the pod spec and to every process; the "
    "model comes from the store, which holds the token",
    "--help": "llama-server prints and exits instead of serving",
    "--version": "llama-server prints and exits instead of serving",
    "--list-devices": "llama-server prints and exits instead of serving",
    "--completion-bash": "llama-server prints and exits instead of serving",
    "--cache-list": "llama-server prints and exits instead of serving",
    "--ssl-key-file": "llama-server would speak HTTPS, which the probes, the Service's clients "
    "and the metrics proxy do not",
    "--ssl-cert-file": "llama-server would speak HTTPS, which the probes, the Service's clients "
    "and the metrics proxy do not",
    "--api-prefix": "it moves every endpoint, the probes' /health included",
    **refusals(LLAMA_SERVER),
}
"""llama-server b11434's options the component refuses, each with the reason."""

_ADAPTER = "adapter weights the lock does not describe"
PROJECTOR = "a multimodal projector's weights and compute"
LLAMA_SERVER_UNCOUNTABLE: Mapping[str, str] = {
    "--no-host": "it lets weights go to extra buffer types the plan does not place",
    "--device": "it chooses the devices, and the plan places layers on the node's GPU",
    "--split-mode": "it splits weights and KV across GPUs otherwise than by layer",
    "--main-gpu": "it moves what the plan places on the GPU",
    "--override-kv": "it changes the model metadata (layers, heads, lengths) the plan reads "
    "from the GGUF header",
    "--lora": _ADAPTER,
    "--lora-scaled": _ADAPTER,
    "--control-vector": _ADAPTER,
    "--control-vector-scaled": _ADAPTER,
    "--control-vector-layer-range": _ADAPTER,
    "--mmproj": PROJECTOR,
    "--spec-default": "speculative decoding adds a draft with caches of its own",
    "--kv-unified-per-slot": "it sizes the KV cache per slot instead of from -c",
    "--ctx-checkpoints": "context checkpoints keep copies of the KV cache in host RAM",
    "--checkpoint-min-step": "context checkpoints keep copies of the KV cache in host RAM",
    "--lookup-cache-static": "it loads an n-gram lookup cache into host RAM",
    "--lookup-cache-dynamic": "it loads an n-gram lookup cache into host RAM",
    "--pooling": "it runs an embedding graph, not the generation graph the plan estimates",
    "--embedding": "it runs an embedding graph, not the generation graph the plan estimates",
    "--rerank": "it runs a reranking graph, not the generation graph the plan estimates",
    "--backend-sampling": "it samples on the GPU, in buffers the plan does not estimate",
}
"""llama-server options that change memory in ways the plan cannot count, each with the reason."""


VLLM_SERVE_REFUSED: Mapping[str, str] = {
    "--config": "it reads more options from a file on the host that the program does not "
    "ship: give them here",
    "--hf-token": "a secret in argv is visible in the compose file and to every process; the "
    "weights are on the host already (HF_HUB_OFFLINE)",
    "--help": "vllm serve prints and exits instead of serving",
    "--headless": "no API server would answer Caddy",
    "--grpc": "vLLM would serve gRPC, not the HTTP API Caddy forwards",
    "--uds": "vLLM would listen on a socket file, not the port Caddy forwards to",
    "--ssl-keyfile": "vLLM would speak HTTPS, and Caddy forwards HTTP to it",
    "--ssl-certfile": "vLLM would speak HTTPS, and Caddy forwards HTTP to it",
    **refusals(VLLM_SERVE),
}
"""`vllm serve` options the component refuses, each with the reason."""

_WEIGHTS = "it changes the weights' size or place (the plan counts the checkpoint's bytes in HBM)"
_GPUS = "it spreads the model over more GPUs or processes (the plan is one GPU's)"
_ADAPTERS = "LoRA adapters take HBM the plan does not count"
_GRAPHS = "it changes the CUDA/HIP graphs and their memory beyond the activation reserve"
_CACHE = "it sizes a cache the plan does not count"
_MM = "the multimodal encoder's caches and buffers are not in the plan"
VLLM_SERVE_UNCOUNTABLE: Mapping[str, str] = {
    # options
    "--api-server-count": "more API server processes take host RAM the plan does not count",
    # ModelConfig
    "--runner": "it runs another kind of model (pooling) than the plan's",
    "--convert": "it runs another kind of model (pooling) than the plan's",
    "--dtype": _WEIGHTS,
    "--quantization": _WEIGHTS,
    "--quantization-config": _WEIGHTS,
    "--hf-config-path": "it reads another model configuration than the checkpoint's",
    "--hf-overrides": "it changes the model configuration the plan's weights come from",
    "--model-class-overrides": "it loads another model class than the checkpoint's",
    "--enable-sleep-mode": "sleep mode moves the weights to host RAM, which the plan does not "
    "count",
    # ParallelConfig
    "--pipeline-parallel-size": _GPUS,
    "--nnodes": _GPUS,
    "--node-rank": _GPUS,
    "--device-ids": _GPUS,
    "--decode-context-parallel-size": _GPUS,
    "--prefill-context-parallel-size": _GPUS,
    "--data-parallel-size": _GPUS,
    "--data-parallel-rank": _GPUS,
    "--data-parallel-start-rank": _GPUS,
    "--data-parallel-size-local": _GPUS,
    "--data-parallel-hybrid-lb": _GPUS,
    "--data-parallel-external-lb": _GPUS,
    "--data-parallel-multi-port-external-lb": _GPUS,
    "--enable-expert-parallel": _GPUS,
    "--enable-elastic-ep": _GPUS,
    "--elastic-ep-max-dp-size": _GPUS,
    "--enable-eplb": "redundant experts take HBM the plan does not count",
    "--eplb-config": "redundant experts take HBM the plan does not count",
    "--enable-dbo": "dual-batch overlap keeps two micro-batches' activations",
    "--ubatch-size": "dual-batch overlap keeps two micro-batches' activations",
    # CacheConfig
    "--num-gpu-blocks-override": "it sizes the KV cache otherwise than --kv-cache-memory-bytes",
    "--mamba-cache-dtype": _CACHE,
    "--mamba-ssm-cache-dtype": _CACHE,
    "--mamba-block-size": _CACHE,
    "--mamba-cache-mode": _CACHE,
    "--enable-mamba-shared-prefix-checkpoint": _CACHE,
    "--replayssm-buffer-len": _CACHE,
    "--use-replayssm": _CACHE,
    # OffloadConfig
    "--offload-backend": _WEIGHTS,
    "--cpu-offload-gb": _WEIGHTS,
    "--cpu-offload-params": _WEIGHTS,
    "--offload-group-size": _WEIGHTS,
    "--offload-num-in-group": _WEIGHTS,
    "--offload-prefetch-step": _WEIGHTS,
    "--offload-params": _WEIGHTS,
    # MultiModalConfig
    "--limit-mm-per-prompt": _MM,
    "--mm-processor-cache-gb": _MM,
    "--mm-processor-cache-type": _MM,
    "--mm-shm-cache-max-object-size-mb": _MM,
    "--mm-encoder-tp-mode": _MM,
    "--mm-ipc-gpu-memory-gb": _MM,
    "--mm-tensor-ipc": _MM,
    "--mm-processor-device": _MM,
    # LoRAConfig
    "--enable-lora": _ADAPTERS,
    "--max-loras": _ADAPTERS,
    "--max-lora-rank": _ADAPTERS,
    "--max-cpu-loras": "LoRA adapters cached in host RAM are not in the plan",
    "--fully-sharded-loras": _ADAPTERS,
    "--default-mm-loras": _ADAPTERS,
    # SchedulerConfig
    "--max-num-scheduled-tokens": "it changes the tokens a step holds activations for",
    "--scheduler-reserve-full-isl": "it changes what the scheduler holds in the KV cache",
    # CompilationConfig, VllmConfig
    "--cudagraph-capture-sizes": _GRAPHS,
    "--max-cudagraph-capture-size": _GRAPHS,
    "--compilation-config": _GRAPHS,
    "--optimization-level": _GRAPHS,
    "--performance-mode": _GRAPHS,
    "--kv-transfer-config": "a KV connector keeps KV caches elsewhere (host RAM, disk)",
    "--ec-transfer-config": "an encoder-cache connector keeps caches the plan does not count",
    "--ec-manager-config": "the encoder cache takes memory the plan does not count",
    "--diffusion-config": "it runs a diffusion model, not the plan's",
    "--engram-config": "engram memory is not in the plan",
    "--weight-transfer-config": _WEIGHTS,
    "--additional-config": "platform options the plan cannot read",
}
"""`vllm serve` options of the engine's groups that change memory in ways the plan cannot count."""
