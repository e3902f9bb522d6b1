"""vLLM 0.33's own /metrics on loopback, fed with the engine statistics of a busy server.

Usage (the vLLM venv's python): `VLLM_TARGET_DEVICE=cpu python vllm_metrics_exporter.py PORT
SERVED_NAME SPEC_TOKENS`. Prints `ready` once `/metrics` serves, then records a scheduler step
every 0.2 s until killed. The endpoint is vLLM's own (`attach_router` of its API server, under
uvicorn) and the series come from its `PrometheusStatLogger`. No GPU and no engine run here:
the configuration is the handful of fields the logger reads, and the statistics are vLLM's own
dataclasses filled as a decoding server fills them (2 running, 1 waiting, 42% KV cache, DSpark
drafting). What comes out is what vLLM makes of them: the real names, labels, types and format.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types


def main(argv: list[str]) -> int:
    port, served_name, spec_tokens = int(argv[0]), argv[1], int(argv[2])
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import uvicorn
    from fastapi import FastAPI
    from vllm.config import CacheConfig, ObservabilityConfig
    from vllm.entrypoints.serve.instrumentator.metrics import attach_router
    from vllm.v1.engine import FinishReason
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import (
        FinishedRequestStats,
        IterationStats,
        PrefixCacheStats,
        SchedulerStats,
    )
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    config = types.SimpleNamespace(
        observability_config=ObservabilityConfig(),
        cache_config=CacheConfig(),
        model_config=types.SimpleNamespace(
            served_model_name=served_name, max_model_len=262144, is_diffusion=False
        ),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=spec_tokens),
        lora_config=None,
        kv_transfer_config=None,
        ec_transfer_config=None,
        watermark_config=None,
    )
    logger = PrometheusStatLogger(config)
    app = FastAPI()
    attach_router(app)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    print("ready", flush=True)
    while True:
        spec = SpecDecodingStats.new(spec_tokens)
        for _ in range(10):
            spec.observe_draft(num_draft_tokens=spec_tokens, num_accepted_tokens=4)
        scheduler = SchedulerStats(
            num_running_reqs=2,
            num_waiting_reqs=1,
            kv_cache_usage=0.42,
            prefix_cache_stats=PrefixCacheStats(requests=2, queries=400, hits=100),
            spec_decoding_stats=spec,
        )
        iteration = IterationStats()
        iteration.num_generation_tokens = 50
        # 400 prompt tokens, 100 of them from the prefix cache.
        iteration.prompt_token_stats.total = 400
        iteration.prompt_token_stats.computed = 300
        iteration.prompt_token_stats.local_cache_hit = 100
        iteration.prompt_token_stats.cached_tokens = 100
        iteration.time_to_first_tokens_iter = [0.25, 0.4]
        iteration.inter_token_latencies_iter = [0.006] * 10
        iteration.finished_requests = [
            FinishedRequestStats(
                finish_reason=FinishReason.STOP,
                e2e_latency=2.0,
                num_prompt_tokens=400,
                num_generation_tokens=300,
                decode_time=1.8,
                mean_time_per_output_token=0.006,
            )
        ]
        logger.record(scheduler, iteration)
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
