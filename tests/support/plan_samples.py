"""Memory-plan inputs as the unit tests share them."""

from __future__ import annotations

from infra.plan.deepseek4 import AttentionShape
from infra.plan.llamacpp import LlamaCppPlanInputs, ModelWeights
from infra.plan.report import GIB, MIB

VULKAN_MEASURED = LlamaCppPlanInputs(
    weights=ModelWeights.from_file_sizes(64 * MIB, 2),
    attention=AttentionShape(
        kind="standard", n_layer=2, n_head_kv=(16, 16), head_k=64, head_v=64, n_head=16,
        n_embd=1024, n_ff=2048, n_vocab=32000,
    ),
    gpu_layers=3, ctx_size=65536, vram_bytes=8 * GIB, memory_limit_bytes=16 * GIB,
)  # fmt: skip
"""A 2-layer llama (n_embd 1024, n_ff 2048) with every layer on an 8 GiB GPU at -c 65536 (-np 1,
-ub 512, F16 cache): a shape whose compute buffers b11434 was measured with on an H200 through
Vulkan."""
