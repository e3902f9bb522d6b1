"""``llm-infra bench`` against the real llama-server b11434 on a tiny model (plus a fake SSE)."""

from __future__ import annotations

import http.server
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.payloads.bench import BenchConfig, busy_seconds, run_bench
from components.payloads.bench_client import stream_chat
from components.payloads.bench_report import SEED_002, BenchReport, agreement, format_table
from infra.cli.bench import main as bench_main
from tests.conftest import ROOT
from tests.support.llama_server import run_llama_server, tiny_server_argv
from tests.support.tiny_gguf import write_tiny_split_model

pytestmark = pytest.mark.alone  # the client's clock against the server's, on a quiet machine

SLOTS = 4
# The tiny model decodes ~2,500 tok/s on this CPU: 1,024 tokens take ~0.4 s, so a client stall of
# a few milliseconds at the start of a stream (which shortens the client's window and reads
# high) moves a figure by ~1%, not the 30-40% it moved 128 tokens (32 ms) by on a busy CI.
DECODE_TOKENS = 1024


@pytest.fixture(scope="module")
def report_and_table(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BenchReport, str, dict[str, object]]]:
    root = tmp_path_factory.mktemp("bench")
    model = write_tiny_split_model(root / "model", "tiny", 3)[0]
    cfg = BenchConfig(
        decode_requests=5, decode_tokens=DECODE_TOKENS, prefill_requests=2, prefill_words=250,
        concurrency=[1, SLOTS, 2 * SLOTS], concurrent_tokens=256, requests_per_stream=1,
        sample_interval=0.01, warmup_rounds=1,
    )  # fmt: skip
    argv = tiny_server_argv(model, "--metrics", "--api-key", "k", parallel=SLOTS)
    with run_llama_server(argv) as url:
        report = run_bench(url, cfg, api_key="k")
        out = root / "bench.json"
        rc = bench_main([
            url, "--api-key", "k", "--output-file", str(out), "--decode-requests", "1",
            "--decode-tokens", "16", "--prefill-requests", "1", "--prefill-words", "100",
            "--concurrency", "2", "--concurrent-tokens", "16", "--requests-per-stream", "1",
            "--timeout", "120", "--warmup-rounds", "0",
        ])  # fmt: skip
        assert rc == 0
        # As documented: a plain Python from the checkout's root, no site-packages (no pulumi)
        # and no PYTHON* variables, runs `python3 -m bench.serve`.
        plain = subprocess.run(
            [sys.executable, "-E", "-S", "-m", "bench.serve", url, "--api-key", "k",
             "--decode-requests", "1", "--decode-tokens", "8", "--prefill-requests", "1",
             "--prefill-words", "50", "--concurrency", "1", "--concurrent-tokens", "8",
             "--requests-per-stream", "1", "--warmup-rounds", "0"],
            capture_output=True, text=True, check=False, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert plain.returncode == 0, plain.stderr
        assert "single-stream decode tok/s" in plain.stdout
    yield report, format_table(report), json.loads(out.read_text())


def test_every_figure_is_produced(
    report_and_table: tuple[BenchReport, str, dict[str, object]],
) -> None:
    report, table, saved = report_and_table
    assert report.errors == []
    for value in (report.decode_tok_s, report.decode_server_tok_s, report.ttft_ms,
                  report.prefill_tok_s, report.prefill_server_tok_s):  # fmt: skip
        assert value is not None and value > 0
    assert [lvl.concurrency for lvl in report.levels] == [1, SLOTS, 2 * SLOTS]
    assert all(lvl.aggregate_tok_s > 0 and lvl.failed == 0 for lvl in report.levels)
    assert report.slots == SLOTS  # from /props total_slots
    # Side by side with seed 002's figures, except where the server queued the streams.
    for figure in ("168.6", "7,900-8,500", "830"):
        assert figure in table
    (queued,) = [line for line in table.splitlines() if "@ 8 streams" in line]
    assert "QUEUED (4 slots)" in queued and "- (not batched)" in queued
    # Seed 002's 8-stream figure as a figure of its own (not a digit run of a measured one).
    assert not re.search(r"(?<![\d,.])542(?![\d,.])", table), table
    assert [lvl.queued for lvl in report.levels] == [False, False, True]
    assert report.cache_save_ms is not None and report.warmup_s is not None
    assert "prompt-cache save of the previous slot" in table
    # The aggregate's gap to the server-side figure is printed as its own number.
    (outside,) = [ln for ln in table.splitlines() if "outside the server's timings" in ln]
    for lvl in report.levels:
        assert lvl.outside_timings_ms is not None
        assert f"@{lvl.concurrency} {lvl.outside_timings_ms:,.1f}" in outside
    assert "measured / server-side: decode " in table
    assert saved["seed_002"] == SEED_002
    assert saved["levels"][0]["concurrency"] == 2  # type: ignore[index]
    assert isinstance(saved["prefill_cached_tokens"], int)
    assert saved["prefill_cached_tokens"] < 20  # a second run on one server: fresh prompts
    print(table)


def test_tokens_are_counted_from_server_timings_not_chunks(
    report_and_table: tuple[BenchReport, str, dict[str, object]],
) -> None:
    report = report_and_table[0]
    assert report.count_source == "timings.predicted_n"
    ratios = []
    for run in report.decode_runs:
        timings = run["timings"]
        assert run["output_tokens"] == timings["predicted_n"] == DECODE_TOKENS
        ratios.append(run["decode_tok_s"] / timings["predicted_per_second"])
    # The client's inter-token rate and the server's own figure agree, run for run in the
    # middle: one run whose client lost its core for a moment (two cores shared with other
    # test processes) reads low alone.
    assert 0.5 < statistics.median(ratios) < 1.5, report.decode_runs


def test_prefill_uses_fresh_prompts(
    report_and_table: tuple[BenchReport, str, dict[str, object]],
) -> None:
    report = report_and_table[0]
    assert report.prefill_prompt_tokens is not None and report.prefill_prompt_tokens > 1000
    for run in report.prefill_runs:
        # Only the chat template's first tokens may come from the prefix cache.
        assert run["cached_tokens"] < 0.02 * run["prompt_tokens"]
        assert run["timings"]["prompt_n"] == run["prompt_tokens"] - run["cached_tokens"]
    assert report.prefill_tok_s is not None and report.prefill_server_tok_s is not None
    # TTFT covers prefill plus HTTP and one decode step, so the client figure is lower.
    assert 0.2 * report.prefill_server_tok_s < report.prefill_tok_s
    assert report.prefill_tok_s < 1.2 * report.prefill_server_tok_s


def test_figures_agree_with_the_servers_own_timings(
    report_and_table: tuple[BenchReport, str, dict[str, object]],
) -> None:
    ratios = {k: float(v) for k, v in agreement(report_and_table[0]).items()}
    # The tiny model decodes ~2,500 tok/s here (0.4 ms a token). With the machine to itself (the
    # module is `alone`) the client reads 1.000; beside other workers' servers it read 0.797 and
    # 1.109, and one 256-token stream 22x, from a first token that reached it 0.5 s late.
    assert 0.8 <= ratios["decode"] <= 1.05, ratios
    for c in (1, SLOTS, 2 * SLOTS):
        # A few tokens per stream on a CPU: chunks arrive in bursts, so the client's inter-token
        # window is noisier than on a GPU (1.000-1.001 on an H200; up to 1.46 seen on two cores
        # shared with other test processes, before the module ran alone).
        assert 0.8 <= ratios[f"stream decode @{c}"] <= 1.6, ratios
        # The client's wall clock also holds HTTP and the gaps between requests.
        assert 0.75 <= ratios[f"aggregate @{c}"] <= 1.02, ratios
    assert 0.5 <= ratios["prefill"] <= 1.05, ratios


def test_busy_seconds_is_the_union_of_the_windows() -> None:
    assert busy_seconds([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4.0
    assert busy_seconds([]) == 0.0


def test_concurrency_is_really_reached_server_side(
    report_and_table: tuple[BenchReport, str, dict[str, object]],
) -> None:
    single, full, queued = report_and_table[0].levels
    assert queued.max_busy_slots == SLOTS  # 8 streams, 4 slots: never more than 4 at once
    assert (single.max_busy_slots, single.max_requests_processing) == (1, 1)
    assert full.max_busy_slots == SLOTS  # /slots: is_processing
    assert full.max_requests_processing == SLOTS  # /metrics: llamacpp:requests_processing
    assert full.output_tokens == SLOTS * 256


class _SpeculativeSSE(http.server.BaseHTTPRequestHandler):
    """Streams like a speculative-decoding server: 3 tokens per chunk, vLLM-style usage."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for n in range(3, 31, 3):
            time.sleep(0.03)
            event = {"choices": [{"index": 0, "delta": {"content": "abc"}}],
                     "usage": {"prompt_tokens": 7, "completion_tokens": n}}  # fmt: skip
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        final = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 30}}
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())

    def log_message(self, *args: object) -> None:
        pass


def test_several_tokens_per_chunk_are_counted(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SpeculativeSSE)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        r = stream_chat(url, {"model": "m", "messages": []})
    finally:
        server.shutdown()
    assert r.ok and r.events == 11
    assert (r.output_tokens, r.tokens_at_first, r.count_source) == (
        30,
        3,
        "usage.completion_tokens",
    )
    # 27 tokens over 9 gaps of ~30 ms: ~100 tok/s, where chunk counting would say ~33 (the
    # gaps are long beside a busy machine's scheduling delays).
    assert r.decode_tok_s is not None and 50 < r.decode_tok_s < 110
