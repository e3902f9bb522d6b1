"""Decode speed of llama-server with and without a Prometheus scraping /metrics every 5 s.

    python3 -m bench.metrics_scrape [--seconds 30] [--tokens 512] [--rounds 2]

One run: the local llama-server b11434 (scripts/build-llama's CPU build) on the tiny test model
with `--metrics`, and a real Prometheus (Debian's package) that scrapes it every 5 s in the
"scraped" phases and is stopped in the others. The phases alternate (plain, scraped, plain,
scraped, ...) so that drift of a shared machine falls on both; each phase runs requests back to
back for a fixed time (a 30 s phase spans six scrapes). Each request's decode speed is the
server's own
`timings.predicted_per_second`; the figures are the medians per condition and their ratio,
and the requests completed per second end to end (client, server and, in the scraped phases,
Prometheus itself all share the machine's cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.llama_server import run_llama_server, tiny_server_argv
from tests.support.prometheus import run_prometheus
from tests.support.tiny_gguf import write_tiny_split_model

SCRAPE_INTERVAL = "5s"


def decode_tps(base_url: str, tokens: int, index: int) -> float:
    """One non-streamed completion of exactly `tokens` tokens; the server's decode tok/s."""
    body = {
        "messages": [{"role": "user", "content": f"Request {index}: describe a GPU."}],
        "max_tokens": tokens,
        "ignore_eos": True,
        # A new prompt each time: no request is served from the prompt cache alone.
        "cache_prompt": False,
    }
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        timings = json.loads(response.read())["timings"]
    return float(timings["predicted_per_second"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="length of each phase")
    parser.add_argument("--tokens", type=int, default=512, help="tokens generated per request")
    parser.add_argument("--rounds", type=int, default=2, help="plain + scraped phase pairs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        model = write_tiny_split_model(Path(scratch), "tiny", shards=1)[0]
        argv_ = tiny_server_argv(model, "--metrics", parallel=1)
        port = argv_[argv_.index("--port") + 1]
        config = {
            "scrape_configs": [
                {
                    "job_name": "llama-server",
                    "scrape_interval": SCRAPE_INTERVAL,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                }
            ]
        }
        speeds: dict[str, list[float]] = {"plain": [], "scraped": []}
        scrapes = 0
        with run_llama_server(argv_, timeout=120) as base_url:
            decode_tps(base_url, args.tokens, -1)  # warm-up
            index = 0

            def phase(name: str) -> None:
                nonlocal index
                end = time.monotonic() + args.seconds
                while time.monotonic() < end:
                    speeds[name].append(decode_tps(base_url, args.tokens, index))
                    index += 1

            for _ in range(args.rounds):
                phase("plain")
                with run_prometheus(config) as prometheus:
                    prometheus.wait_for("up == 1")
                    started = time.monotonic()
                    phase("scraped")
                    window = f"{int(time.monotonic() - started) + 6}s"
                    counted = prometheus.query(f"count_over_time(up[{window}])")
                    scrapes += int(float(counted[0]["value"][1])) if counted else 0
    plain, scraped = (statistics.median(speeds[k]) for k in ("plain", "scraped"))
    print(f"tiny model, {args.tokens} tokens per request, {args.seconds:g} s phases, "
          f"{args.rounds} rounds; Prometheus scraped /metrics {scrapes} times, "
          f"every {SCRAPE_INTERVAL}")  # fmt: skip
    for name, values in speeds.items():
        rate = len(values) / (args.seconds * args.rounds)
        print(f"  {name:8s} decode median {statistics.median(values):7.1f} tok/s "
              f"(min {min(values):.1f}, max {max(values):.1f}, n={len(values)}, "
              f"{rate:.1f} requests/s end to end)")  # fmt: skip
    print(f"  scraped / plain = {scraped / plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
