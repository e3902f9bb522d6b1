"""The planner's deepseek4 KV cache matches what llama-server b11434 allocates, within 2%.

The model is llama.cpp's own tiny random-weight deepseek4 (`test-llama-archs -a deepseek4`),
written by `scripts/build-llama` with the project's one b11434 build (~20 min the
first time, then cached; `LLM_INFRA_LLAMA_DIR` moves the cache). Its GGUF header is
read with `components.gguf_header`, its attention shape and KV cache computed with
`infra.plan.deepseek4`, and the result compared with every DSV4 cache llama-server logs with
`-lv 4`:

    llama_kv_cache_dsv4: creating DSV4 raw KV cache              (the sliding window, via iswa)
    llama_kv_cache_dsv4: creating DSV4 CSA compressed KV cache, size = N cells   (ratio-4 layers)
    llama_kv_cache_dsv4: creating DSV4 HCA compressed KV cache, size = N cells   (ratio-128 layers)
    llama_kv_cache_dsv4: creating DSV4 lightning-indexer KV cache, size = N cells
      each followed by  llama_kv_cache: size = X MiB (N cells, L layers, S/S seqs), K (...) ...
    llama_dsv4_comp_state: csa|hca|lid ratio = R, state = S x E, streams = N, ..., size = X MiB

Run with `-s` to see the predicted-vs-logged table.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.gguf_header import read_gguf_header, summarize
from infra.plan.deepseek4 import (
    DSV4_CSA_RATIO,
    DSV4_HCA_RATIO,
    AttentionShape,
    KvLayers,
    attention_shape,
    kv_cache_layers,
)
from infra.plan.report import MIB
from tests.support.llama_server import free_port, run_llama_server

TOLERANCE = 0.02
GGUF_UINT32 = 4

_CREATE = re.compile(
    r"llama_kv_cache_dsv4: creating DSV4 (raw|CSA compressed|HCA compressed|lightning-indexer)"
    r" KV cache"
)
_ISWA = re.compile(r"llama_kv_cache_iswa: creating +(non-SWA|SWA) KV cache, size = +(\d+) cells")
_KV = re.compile(
    r"llama_kv_cache: size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\)"
)
_STATE = re.compile(
    r"llama_dsv4_comp_state: (csa|hca|lid) ratio = (\d+), state = (\d+) x (\d+), streams = (\d+),"
    r" rs_seq = (\d+), layers = (\d+), size = +([0-9.]+) MiB"
)
_SECTION = {
    "raw": "raw",
    "CSA compressed": "csa",
    "HCA compressed": "hca",
    "lightning-indexer": "lid",
}


@dataclass(frozen=True)
class Case:
    """One llama-server configuration."""

    name: str
    ctx: int
    parallel: int
    cache: str
    unified: bool = False
    ubatch: int = 512


# The tiny model's caches are small; the log prints MiB with two decimals, so the long contexts
# (and a large ubatch for the raw window) are what make the 2% comparison bite.
CASES = [
    Case("q8_0-c4096-np1", 4096, 1, "q8_0"),
    Case("f16-c4096-np1", 4096, 1, "f16"),
    Case("f16-c8192-np2", 8192, 2, "f16"),
    Case("f16-c384-np1", 384, 1, "f16"),
    Case("q8_0-c16384-np1-ub256", 16384, 1, "q8_0", ubatch=256),
    Case("f16-c262144-np4-ub2048", 262144, 4, "f16", ubatch=2048),
    Case("q8_0-c131072-np2-kvu", 131072, 2, "q8_0", unified=True, ubatch=1024),
    Case("q4_0-c98304-np3", 98304, 3, "q4_0"),
]


@dataclass(frozen=True)
class CacheLine:
    """One `llama_kv_cache: size` line and the DSV4 cache it belongs to."""

    section: str
    """raw-base, raw-swa (the sliding window), csa, hca or lid."""
    mib: float
    cells: int
    layers: int
    streams: int


@dataclass(frozen=True)
class StateLine:
    """One `llama_dsv4_comp_state` summary line."""

    name: str
    ratio: int
    state_size: int
    n_embd_state: int
    streams: int
    rs_seq: int
    layers: int
    mib: float

    @property
    def nbytes(self) -> int:
        """Exact bytes from the logged shape: F32 kv and score tensors per layer and plane."""
        planes = self.streams * (1 + self.rs_seq)
        return 2 * 4 * self.n_embd_state * self.state_size * planes * self.layers


def parse_dsv4_log(log: str) -> tuple[list[CacheLine], list[StateLine]]:
    """The DSV4 cache and compressor-state lines of the last deepseek4 cache llama-server built."""
    caches: list[CacheLine] = []
    states: list[StateLine] = []
    section = ""
    for line in log.splitlines():
        if created := _CREATE.search(line):
            section = _SECTION[created[1]]
            if section == "raw":  # a new cache: keep only the last one logged
                caches, states = [], []
        elif iswa := _ISWA.search(line):
            if section.startswith("raw"):
                section = "raw-base" if iswa[1] == "non-SWA" else "raw-swa"
        elif kv := _KV.search(line):
            caches.append(
                CacheLine(section or "?", float(kv[1]), int(kv[2]), int(kv[3]), int(kv[5]))
            )
        elif st := _STATE.search(line):
            ratio, size, embd, streams, rs_seq, layers = (int(st[i]) for i in range(2, 8))
            states.append(
                StateLine(st[1], ratio, size, embd, streams, rs_seq, layers, float(st[8]))
            )
    return caches, states


@dataclass(frozen=True)
class Component:
    """A part of the deepseek4 KV memory, planned and logged."""

    name: str
    planned_bytes: int
    logged_mib: float
    lines: int
    """How many log lines add up to `logged_mib` (each rounded to 0.01 MiB)."""

    @property
    def planned_mib(self) -> float:
        return self.planned_bytes / MIB

    def within(self) -> bool:
        return abs(self.planned_mib - self.logged_mib) <= (
            TOLERANCE * self.logged_mib + 0.005 * max(self.lines, 1) + 1e-9
        )


def _without(
    shape: AttentionShape, *, ratios: tuple[int, ...] = (), indexer: bool = True
) -> AttentionShape:
    """The shape with the compression ratios in `ratios` set to 0 (and no indexer if asked)."""
    return dataclasses.replace(
        shape,
        compress_ratios=tuple(0 if r in ratios else r for r in shape.compress_ratios),
        indexer_head=shape.indexer_head if indexer else 0,
    )


def planned_components(
    shape: AttentionShape, case: Case, caches: list[CacheLine], states: list[StateLine]
) -> list[Component]:
    """Planner vs log, per DSV4 cache (the planner's layers split by switching parts off)."""

    def kv(s: AttentionShape) -> KvLayers:
        return kv_cache_layers(
            s, case.ctx, case.parallel, case.cache, case.cache,
            ubatch=case.ubatch, kv_unified=case.unified,
        )  # fmt: skip

    full = kv(shape)
    raw = kv(_without(shape, ratios=(DSV4_CSA_RATIO, DSV4_HCA_RATIO))).cache_bytes
    # Switching the ratio-4 layers off drops their CSA and indexer caches.
    no_csa = kv(_without(shape, ratios=(DSV4_CSA_RATIO,))).cache_bytes
    no_lid = kv(_without(shape, indexer=False)).cache_bytes
    ratios = shape.compress_ratios
    state_csa_lid = sum(s for s, r in zip(full.state, ratios, strict=True) if r == DSV4_CSA_RATIO)
    state_hca = sum(s for s, r in zip(full.state, ratios, strict=True) if r == DSV4_HCA_RATIO)

    def logged(*sections: str) -> tuple[float, int]:
        lines = [c.mib for c in caches if c.section in sections]
        return sum(lines), len(lines)

    def logged_state(*names: str) -> tuple[float, int]:
        lines = [s.mib for s in states if s.name in names]
        return sum(lines), len(lines)

    total_logged = sum(c.mib for c in caches) + sum(s.mib for s in states)
    return [
        Component("raw window", raw, *logged("raw-base", "raw-swa")),
        Component("CSA (ratio 4)", no_lid - no_csa, *logged("csa")),
        Component("HCA (ratio 128)", no_csa - raw, *logged("hca")),
        Component("indexer", full.cache_bytes - no_lid, *logged("lid")),
        Component("state CSA+indexer", state_csa_lid, *logged_state("csa", "lid")),
        Component("state HCA", state_hca, *logged_state("hca")),
        Component("cache", full.cache_bytes, *logged("raw-base", "raw-swa", "csa", "hca", "lid")),
        Component("state", full.state_bytes, *logged_state("csa", "hca", "lid")),
        # The state lines also log their shape, which gives their bytes without rounding.
        Component("state, from S x E", full.state_bytes, sum(s.nbytes for s in states) / MIB, 0),
        Component(
            "total", full.cache_bytes + full.state_bytes, total_logged, len(caches) + len(states)
        ),
    ]


@pytest.fixture(scope="module")
def shape(deepseek4_model: Path) -> AttentionShape:
    return _shape_of(deepseek4_model)


@pytest.fixture(scope="module")
def table(shape: AttentionShape) -> Iterator[list[str]]:
    """Rows of the predicted-vs-logged table, printed once the module's cases have run."""
    rows: list[str] = []
    yield rows
    title = (
        f"deepseek4 test model: {shape.n_layer} layers, head {shape.head_k}, indexer "
        f"{shape.indexer_head}, window {shape.sliding_window}, ratios {list(shape.compress_ratios)}"
    )
    header = f"{'case':<24} {'component':<24} {'plan MiB':>10} {'log MiB':>10} {'diff':>8}"
    print("\n" + "\n".join([title, header, *rows]))


def _shape_of(model: Path) -> AttentionShape:
    with model.open("rb") as stream:
        summary = summarize([read_gguf_header(stream)])
    assert summary["architecture"] == "deepseek4"
    return attention_shape(summary["architecture"], summary["metadata"], summary.get("vocab_size"))


def _check_against_server(
    model: Path, shape: AttentionShape, case: Case, tmp_path: Path, table: list[str]
) -> None:
    argv = ["-m", str(model), "--port", str(free_port()), "--threads", "2", "-lv", "4"]
    argv += ["-c", str(case.ctx), "-np", str(case.parallel), "-ngl", "0", "-ub", str(case.ubatch)]
    argv += ["--cache-type-k", case.cache, "--cache-type-v", case.cache]
    argv += ["-kvu"] if case.unified else ["-no-kvu"]
    log_path = tmp_path / "llama-server.log"
    with run_llama_server(argv, timeout=120.0, log_path=log_path):
        pass
    log = log_path.read_text(errors="replace")
    caches, states = parse_dsv4_log(log)
    dsv4_lines = "\n".join(
        line for line in log.splitlines() if "dsv4" in line or "llama_kv_cache" in line
    )
    sections = sorted({c.section for c in caches})
    assert {"raw-swa", "csa", "hca", "lid"} <= set(sections), (
        f"llama-server did not log every DSV4 cache (got {sections}):\n{dsv4_lines}"
    )
    assert {s.name for s in states} == {"csa", "hca", "lid"}, dsv4_lines
    assert all(s.rs_seq == 0 for s in states), "the planner assumes no rollback planes here"

    components = planned_components(shape, case, caches, states)
    for c in components:
        diff = c.planned_mib - c.logged_mib
        table.append(
            f"{case.name:<24} {c.name:<24} {c.planned_mib:10.2f} {c.logged_mib:10.2f} {diff:+8.2f}"
        )
    wrong = [c for c in components if not c.within()]
    assert not wrong, (
        "planner vs llama-server: "
        + "; ".join(f"{c.name} {c.planned_mib:.2f} vs {c.logged_mib:.2f} MiB" for c in wrong)
        + f"\nllama-server's DSV4 cache lines:\n{dsv4_lines}"
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planned_deepseek4_kv_matches_llama_server_log(
    case: Case, deepseek4_model: Path, shape: AttentionShape, tmp_path: Path, table: list[str]
) -> None:
    _check_against_server(deepseek4_model, shape, case, tmp_path, table)


def _with_nextn_predict_layers(model: Path, out: Path, value: int) -> Path:
    """A copy of `model` with its u32 `deepseek4.nextn_predict_layers` patched to `value`."""
    data = bytearray(model.read_bytes())
    key = b"deepseek4.nextn_predict_layers"
    at = data.find(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    assert at > 8 + len(key), f"{model} has no {key.decode()} key"
    assert struct.unpack_from("<I", data, at)[0] == GGUF_UINT32, "not a u32 value"
    struct.pack_into("<I", data, at + 4, value)
    out.write_bytes(data)
    return out


def test_planned_deepseek4_kv_counts_every_block_even_with_nextn_metadata(
    deepseek4_model: Path, tmp_path: Path, table: list[str]
) -> None:
    model = _with_nextn_predict_layers(deepseek4_model, tmp_path / "nextn1.gguf", 1)
    case = Case("nextn1-f16-c262144-np4", 262144, 4, "f16", ubatch=2048)
    _check_against_server(model, _shape_of(model), case, tmp_path, table)


def test_parse_dsv4_log_keeps_the_last_cache_and_its_sections() -> None:
    block = (
        "llama_kv_cache_dsv4: creating DSV4 raw KV cache\n"
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells\n"
        "llama_kv_cache: size =    0.00 MiB (  4096 cells,   0 layers,  1/1 seqs), K (q8_0): ...\n"
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells\n"
        "llama_kv_cache: size =    1.59 MiB (   768 cells,   4 layers,  1/1 seqs), K (q8_0): ...\n"
        "llama_kv_cache_dsv4: creating DSV4 HCA compressed KV cache, size = 32 cells\n"
        "llama_kv_cache: size =    0.13 MiB (   256 cells,   1 layers,  1/1 seqs), K (q8_0): ...\n"
        "llama_dsv4_comp_state: hca ratio = 128, state = 128 x 64, streams = 1, rs_seq = 0, "
        "layers = 1, size =    0.06 MiB\n"
    )
    earlier = "llama_kv_cache: size = 9.00 MiB (1 cells, 1 layers, 1/1 seqs)\n"
    caches, states = parse_dsv4_log(earlier + block.replace("1.59", "7.77") + block)
    assert [c.section for c in caches] == ["raw-base", "raw-swa", "hca"]
    assert [c.mib for c in caches] == [0.0, 1.59, 0.13]
    assert states == [StateLine("hca", 128, 128, 64, 1, 0, 1, 0.06)]
    assert states[0].nbytes == 2 * 4 * 128 * 64
