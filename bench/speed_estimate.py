"""The plan's speed estimate beside llama-server's own measured decode and prefill.

    python3 -m bench.speed_estimate

Two sets of recorded runs, each split into the runs a backend's calibration is derived from and
the runs that only check it:

- Vulkan: `tests/fixtures/speed/vulkan.json` (`bench.speed_measure --backend vulkan`), generated
  shapes on one NVIDIA H100 through NVIDIA's Vulkan driver, one machine in one call:
  `bench.speed_shapes.GPU_CALIBRATION`'s shapes calibrate, the shapes declared as checks before
  any run of them (`GPU_CHECKS`) and the two of 1.6 GiB layers check. The same kind of machine
  on other days (`OTHER_GPU_RECORDS`, the 43-layer random llama's bake-off, the H200's figures)
  checks it again: those runs show how far one machine of a kind is from another.
- CPU: `tests/fixtures/speed/cpu.json` (`bench.speed_measure`): generated dense and MoE models
  at depths 0 and 4096; `bench.speed_shapes.CALIBRATION` calibrates, the other shapes check.

The efficiencies are least-squares fits of the estimate's terms (each term's seconds, at an
efficiency of 1, is one column), so the estimate's own formula is what is fitted.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bench.speed_shapes import CALIBRATION, GPU_CALIBRATION
from components.payloads.tune_measure import prefilled
from infra.devices import DEVICES
from infra.plan.deepseek4 import attention_shape
from infra.plan.llamacpp_inputs import LlamaCppPlanInputs, ModelWeights
from infra.plan.llamacpp_speed import llamacpp_speed_inputs
from infra.plan.report import GIB
from infra.plan.speed import UBATCH, SpeedInputs, decode_seconds, prefill_seconds
from infra.plan.speed_calibrations import Calibration, Efficiency

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
TOLERANCE = 0.25
"""The estimate must be within 25 % of a measurement it was not calibrated on."""

Kind = Literal["decode", "prefill", "prompt"]
FIGURES: tuple[tuple[Kind, str], ...] = (
    ("decode", "decodeTokSServer"),
    ("prefill", "prefillTokSServer"),
)
"""llama-server's own figures (its `timings`) of a measured depth."""
OFF = float("inf")
"""An efficiency that takes its term out (seconds / inf = 0)."""


@dataclass(frozen=True)
class Point:
    """One measured figure and the estimate's inputs for it."""

    label: str
    inputs: SpeedInputs
    kind: Kind
    """`decode` and `prefill` (512 new tokens) at `depth`; `prompt`: a whole prompt of
    `depth` tokens from an empty slot (tok/s = tokens / time to its first token)."""
    depth: int
    measured: float
    calibration: bool
    runs: tuple[float, ...] = ()
    """Every run's figure (the median is `measured`)."""

    def within(self, estimate: float) -> bool:
        """Within `TOLERANCE` of the median; where the runs themselves spread wider than that
        around it, within the runs' range widened by `TOLERANCE`."""
        if abs(estimate / self.measured - 1) <= TOLERANCE:
            return True
        if not self.runs or (max(self.runs) - min(self.runs)) / 2 <= TOLERANCE * self.measured:
            return False
        return min(self.runs) * (1 - TOLERANCE) <= estimate <= max(self.runs) * (1 + TOLERANCE)


def plan_inputs(
    summary: dict[str, Any], ngl: int, ctx: int, cache: str, *, gpu: bool, device: str,
    threads: int | None = None,
) -> SpeedInputs:  # fmt: skip
    """The estimate's inputs for a model (its header summary) served with these flags."""
    arch, meta = summary["architecture"], summary["metadata"]
    inputs = LlamaCppPlanInputs(
        weights=ModelWeights.from_summary(summary, "GGUF header"),
        attention=attention_shape(arch, meta, summary.get("vocab_size")),
        gpu_layers=ngl,
        ctx_size=ctx,
        cache_type_k=cache,
        cache_type_v=cache,
        vram_bytes=80 * GIB if gpu else None,
        gpu_device="Vulkan0" if gpu else "CPU0",
    )
    figures = DEVICES[device]
    host = DEVICES[figures.host] if figures.host else None
    found = llamacpp_speed_inputs(inputs, meta, arch, figures, host, threads)
    assert not isinstance(found, str), found
    return found[0]


GPU_RECORD = FIXTURES / "speed" / "vulkan.json"
"""`bench.speed_measure --backend vulkan` on one H100 machine in one call: `GPU_CALIBRATION`'s
shapes (calibrate), `GPU_CHECKS`' and the two of 1.6 GiB layers (check)."""
OTHER_GPU_RECORDS = {
    "earlier": FIXTURES / "speed" / "vulkan-earlier.json",
    "other-a": FIXTURES / "speed" / "vulkan-other-a.json",
    "other-b": FIXTURES / "speed" / "vulkan-other-b.json",
}
"""The same command on other machines of the same kind (H100, a 16-core Xeon VM), other days:
the previous calibration's runs and the small shapes (`earlier`), and two calls before
`GPU_RECORD`'s (`other-a`, `other-b`, the second with a calibration shape again)."""


def gpu_points(record: dict[str, Any] | None = None, *, calibrating: bool = True) -> list[Point]:
    """The GPU runs of `bench.speed_measure` (each shape at each `-ngl`); `GPU_CALIBRATION`'s
    shapes calibrate where `calibrating`."""
    if record is None:
        record = json.loads(GPU_RECORD.read_text())
    points = []
    for model in record["models"]:
        inputs = plan_inputs(
            model["summary"], model["ngl"], model["context"], "f16", gpu=True,
            device=record["device"], threads=record["threads"],
        )  # fmt: skip
        label = f"{model['shape']} -ngl {model['ngl']}"
        calibration = calibrating and model["shape"] in GPU_CALIBRATION
        points += record_points(label, inputs, model["figures"], calibration=calibration)
    return points


def other_machine_points() -> dict[str, list[Point]]:
    """Runs on other machines of the calibration's kind, all checks: each record of
    `OTHER_GPU_RECORDS`, and `llama43`: the 43-layer llama's H100 bake-off (`-ngl 99/40/20`,
    q8_0 KV, depths 0/32768/64512) with the H200's figures of the rendered argv."""
    summary = json.loads((FIXTURES / "speed" / "llama43-summary.json").read_text())
    record = json.loads((FIXTURES / "tune" / "h100" / "tune.json").read_text())
    llama = []
    for candidate in record["candidates"]:
        name = candidate["name"]
        if not name.startswith("vulkan-ngl-"):
            continue
        ngl = int(name.rpartition("-")[2])
        inputs = plan_inputs(summary, ngl, 65536, "q8_0", gpu=True, device="h100-sxm", threads=8)
        for fig in candidate["figures"]:
            for kind, key in FIGURES:
                llama.append(
                    Point(f"H100 -ngl {ngl}", inputs, kind, fig["depth"], fig[key]["median"],
                          calibration=False, runs=tuple(fig[key]["runs"]))
                )  # fmt: skip
    # tests/fixtures/gpu_gate/h200-run.txt, "bench on llama43 (rendered argv)": the rendered
    # strix-halo argv (-ngl 40 -c 65536, q8_0) on an H200, llama-server's own figures.
    h200 = plan_inputs(summary, 40, 65536, "q8_0", gpu=True, device="h200", threads=8)
    llama += [
        Point("H200 -ngl 40", h200, "decode", 0, 229.5, calibration=False),
        Point("H200 -ngl 40", h200, "prompt", 23956, 9546.8, calibration=False),
    ]
    out = {
        name: gpu_points(json.loads(path.read_text()), calibrating=False)
        for name, path in OTHER_GPU_RECORDS.items()
    }
    return {**out, "llama43": llama}


def machine_ratios(
    here: Sequence[Point], other: Sequence[Point]
) -> list[tuple[Point, Point, float]]:
    """Each figure measured on both machines (the same shape, `-ngl`, figure and depth): the
    other machine's over this one's."""
    index = {(p.label, p.kind, p.depth): p for p in here}
    pairs = [(index.get((p.label, p.kind, p.depth)), p) for p in other]
    return [(mine, p, p.measured / mine.measured) for mine, p in pairs if mine is not None]


def cpu_points(record: dict[str, Any] | None = None) -> list[Point]:
    """The CPU runs of `bench.speed_measure` (`CALIBRATION`'s shapes calibrate)."""
    if record is None:
        record = json.loads((FIXTURES / "speed" / "cpu.json").read_text())
    points = []
    for model in record["models"]:
        inputs = plan_inputs(
            model["summary"], 0, model["context"], "f16", gpu=False, device=record["device"],
            threads=record["threads"],
        )  # fmt: skip
        calibration = model["shape"] in CALIBRATION
        points += record_points(model["shape"], inputs, model["figures"], calibration=calibration)
    return points


def record_points(
    label: str, inputs: SpeedInputs, figures: list[dict[str, Any]], *, calibration: bool
) -> list[Point]:
    """A `bench.speed_measure` model's figures (each depth's decode and prefill, where
    measured) as points; a prefill run that found its prompt already cached is left out."""
    points = []
    for fig in figures:
        for kind, key in FIGURES:
            runs = processed_runs(fig, kind, fig[key]["runs"])
            if runs:
                points.append(Point(label, inputs, kind, fig["depth"], statistics.median(runs),
                                    calibration=calibration, runs=tuple(runs)))  # fmt: skip
    return points


def processed_runs(fig: dict[str, Any], kind: Kind, runs: list[float]) -> list[float]:
    """The runs of a figure that measured what it names: a prefill run whose prompt the slot
    already held beyond the depth (`cachedTokens` above it: the GPU runs' warm-up request left
    the first run's prompt in the slot, so that run processed one token) measured no prefill."""
    cached = fig.get("cachedTokens", [])
    if kind != "prefill" or len(cached) != len(runs):
        return list(runs)
    return [r for r, c in zip(runs, cached, strict=True) if prefilled(c, fig["depth"])]


def seconds(point: Point, device: Efficiency, host: Efficiency) -> float:
    """The estimate's seconds per token of a point."""
    if point.kind == "decode":
        return decode_seconds(point.inputs, point.depth, device, host)
    if point.kind == "prefill":
        return prefill_seconds(point.inputs, point.depth + UBATCH / 2, device, host)
    start = prefill_seconds(point.inputs, 0, device, host)
    slope = prefill_seconds(point.inputs, 1, device, host) - start
    return start + slope * point.depth / 2


def estimated(point: Point, calibration: Calibration) -> float:
    """The estimate's tok/s of a point under a calibration."""
    return 1 / seconds(point, calibration.device, calibration.host or calibration.device)


ALL_OFF = Efficiency(bandwidth=OFF, kv=OFF, layer_us=0.0, compute=OFF, attention=OFF,
                     copy_weights=OFF, copy_kv=OFF, decode_attention=OFF)  # fmt: skip
INVERSE = {"bandwidth", "kv", "compute", "attention", "copy_weights", "copy_kv",
           "decode_attention"}  # fmt: skip
"""Efficiencies that divide (the fit finds their inverse); the others (`layer_us`,
`ubatch_layer_ms`) add."""


Term = tuple[str, tuple[str, ...]]
"""A fitted term: its side (`device` or `host`) and the efficiencies it sets together (one
share of the bandwidth for weights and KV cache, one of the compute for products and
attention)."""


def _term(names: tuple[str, ...]) -> Efficiency:
    return replace(ALL_OFF, **dict.fromkeys(names, 1.0))


def fit(
    points: Sequence[Point],
    terms: Sequence[Term],
    base: Callable[[Point], float],
) -> dict[Term, float]:
    """Least-squares efficiencies of `terms` ((side, field), side `device` or `host`) over
    `points` in relative error, `base` being the seconds the known terms already account for.
    A term that comes out negative (noise) is dropped and the rest fitted again; a share of a
    peak that comes out above 1 (no runtime beats the published peak) is held at 1."""
    active, at_peak = list(terms), list[Term]()

    def unit(p: Point, term: Term) -> float:
        side, name = term
        dev = _term(name) if side == "device" else ALL_OFF
        hst = _term(name) if side == "host" else ALL_OFF
        return seconds(p, dev, hst)

    while True:
        rows, target = [], []
        for p in points:
            measured = 1 / p.measured
            rows.append([unit(p, t) / measured for t in active])
            known = base(p) + sum(unit(p, t) for t in at_peak)
            target.append(1 - known / measured)
        solution, *_ = np.linalg.lstsq(np.array(rows), np.array(target), rcond=None)
        negative = [t for t, v in zip(active, solution, strict=True) if v <= 0]
        beyond = [t for t, v in zip(active, solution, strict=True)
                  if 0 < v < 1 and set(t[1]) <= INVERSE]  # fmt: skip
        if not negative and not beyond:
            found = dict(zip(active, (float(v) for v in solution), strict=True))
            found.update(dict.fromkeys(at_peak, 1.0))
            return {t: found.get(t, 0.0) for t in terms}
        active = [t for t in active if t not in negative and t not in beyond]
        at_peak += beyond


def efficiency_of(values: dict[Term, float], side: str, start: Efficiency) -> Efficiency:
    """An Efficiency with the fitted values of one side (an inverse fitted where it divides)."""
    changes: dict[str, float] = {}
    for (s, names), value in values.items():
        for name in names if s == side else ():
            if name in INVERSE:
                changes[name] = OFF if value == 0 else 1 / value
            else:
                changes[name] = value
    return replace(start, **changes)


def _seconds_with(device: Efficiency, host: Efficiency) -> Callable[[Point], float]:
    return lambda p: seconds(p, device, host)


CPU_DECODE = (("bandwidth",), ("decode_attention",), ("layer_us",))
"""A CPU process at decode: its CPU reads the weights at a share of its bandwidth and attends over
the KV cache at a share of its compute (llama.cpp's CPU attention works query head by query head,
bound by compute), a fixed cost per layer."""
HOST_PREFILL = (("copy_weights",), ("copy_kv",))
"""A GPU process's CPU layers at prefill: their weights and KV cache copied to the GPU each step,
at a share of the host's bandwidth."""
CPU_PREFILL = (("compute",), ("attention",), ("ubatch_layer_ms",))
"""A CPU process: llama.cpp's CPU attention runs at a rate of its own, far below its products
(flash attention over the cache, one query row at a time)."""


def fit_cpu(points: Sequence[Point]) -> Calibration:
    """The CPU backend: decode and prefill of the calibration shapes."""
    calib = [p for p in points if p.calibration]
    decode = [p for p in calib if p.kind == "decode"]
    prefill = [p for p in calib if p.kind == "prefill"]
    zero = _seconds_with(ALL_OFF, ALL_OFF)
    d = fit(decode, [("device", n) for n in CPU_DECODE], zero)
    eff = efficiency_of(d, "device", ALL_OFF)
    pf = fit(prefill, [("device", n) for n in CPU_PREFILL], zero)
    eff = efficiency_of(pf, "device", eff)
    shapes = ", ".join(CALIBRATION)
    return Calibration("cpu", _finite(eff), None, f"llama-server's CPU build, {shapes}")


VULKAN_DECODE = (
    ("bandwidth",), ("layer_us",), ("moe_layer_us",), ("kv_element_ps",), ("cell_layer_ns",),
)  # fmt: skip
"""Vulkan's decode: the weights at a share of the bandwidth, fixed costs per layer and per
mixture-of-experts layer, the attention per KV element and per context token and layer."""
VULKAN_PREFILL = (
    ("compute",), ("attention",), ("ubatch_layer_ms",), ("ubatch_moe_layer_ms",),
    ("prefill_cell_layer_ns",), ("ubatch_ms",),
)  # fmt: skip
"""Vulkan's prefill: the products and the attention at shares of the compute, fixed costs per
layer and per mixture-of-experts layer in each step, per context token and layer, per step."""


VULKAN_HOST_DECODE = (
    ("bandwidth",), ("kv_element_ps",), ("decode_attention",), ("layer_us",), ("param_ps",),
)  # fmt: skip
"""A GPU process's CPU layers at decode: their weights at a share of the host's bandwidth and a
cost per weight (the CPU dequantizes and multiplies each), their KV cache per element whatever its
type (llama.cpp's CPU attention turns a q8_0 cache into floats as it reads it: the 43-layer
llama's q8_0 runs showed that a byte of it costs about twice an F16 byte), their attention at a
share of the host's compute (query head by query head), a fixed cost per layer."""


def split(point: Point) -> bool:
    """Some of the model's weights are on the host (a GPU process's CPU layers)."""
    return point.inputs.on_host.weight_bytes > 0


def fit_vulkan(points: Sequence[Point]) -> Calibration:
    """Vulkan: the GPU's terms from the calibration runs with every layer on the GPU, then the
    host's from those with layers on the host."""
    gpu = [p for p in points if p.calibration and not split(p)]
    on_host = [p for p in points if p.calibration and split(p)]
    zero = _seconds_with(ALL_OFF, ALL_OFF)
    d = fit([p for p in gpu if p.kind == "decode"], [("device", n) for n in VULKAN_DECODE], zero)
    device = efficiency_of(d, "device", ALL_OFF)
    pf = fit([p for p in gpu if p.kind == "prefill"], [("device", n) for n in VULKAN_PREFILL],
             zero)  # fmt: skip
    device = efficiency_of(pf, "device", device)
    known = _seconds_with(device, ALL_OFF)
    hd = fit([p for p in on_host if p.kind == "decode"],
             [("host", n) for n in VULKAN_HOST_DECODE], known)  # fmt: skip
    host = efficiency_of(hd, "host", ALL_OFF)
    hp = fit([p for p in on_host if p.kind == "prefill"], [("host", n) for n in HOST_PREFILL],
             known)  # fmt: skip
    host = efficiency_of(hp, "host", host)
    shapes = ", ".join(GPU_CALIBRATION)
    measured = f"H100 (one machine, one call): {shapes}, every layer and half on the GPU"
    return Calibration("vulkan", _finite(device), _finite(host), measured)


def _finite(eff: Efficiency) -> Efficiency:
    """Rounded to 3 significant digits, as declared in `infra.plan.speed.CALIBRATIONS`."""
    changes = {}
    for f in fields(eff):
        value = getattr(eff, f.name)
        changes[f.name] = value if value in (0.0, OFF) else float(f"{value:.3g}")
    return replace(eff, **changes)


HEADER = (f"{'run':<18} {'figure':<8} {'depth':>6} {'measured':>9} {'runs':>19} "
          f"{'estimate':>9} {'error':>7}  role")  # fmt: skip
"""The first line of `table`."""


def table(points: Sequence[Point], calibration: Calibration) -> tuple[str, list[Point]]:
    """Estimate vs measured (the median of the runs, and their range) for each point, and the
    check points the estimate misses."""
    lines = [HEADER]
    missed = []
    for p in points:
        est = estimated(p, calibration)
        error = est / p.measured - 1
        role = "calibration" if p.calibration else "check"
        if not p.calibration:
            ok = p.within(est)
            role += "" if ok else " MISSED"
            missed += [] if ok else [p]
            if ok and abs(error) > TOLERANCE:
                role += " (within the runs' range)"
        span = f"{min(p.runs):,.1f}-{max(p.runs):,.1f}" if p.runs else "-"
        lines.append(f"{p.label:<18} {p.kind:<8} {p.depth:>6} {p.measured:>9,.1f} {span:>19} "
                     f"{est:>9,.1f} {error:>+7.1%}  {role}")  # fmt: skip
    return "\n".join(lines), missed


def shape_of_point(point: Point) -> str:
    """The generated shape a GPU run's point is of (its label is `SHAPE -ngl N`)."""
    return point.label.rpartition(" -ngl ")[0]


def each_shape_left_out(points: Sequence[Point]) -> list[tuple[Point, Calibration]]:
    """Each calibration shape of the GPU run against a calibration fitted without it: its points
    (as checks) and that calibration. Six shapes, each estimated by the other five."""
    out = []
    for shape in GPU_CALIBRATION:
        without = [replace(p, calibration=False) if shape_of_point(p) == shape else p
                   for p in points]  # fmt: skip
        calibration = fit_vulkan(without)
        out += [(p, calibration) for p in without if shape_of_point(p) == shape]
    return out


def main() -> int:
    vulkan = gpu_points()
    calibrations = {}
    for name, points, fitter in (
        ("vulkan", vulkan, fit_vulkan),
        ("cpu", cpu_points(), fit_cpu),
    ):
        calibrations[name] = calibration = fitter(points)
        text, missed = table(points, calibration)
        print(f"== {name}: {calibration}")
        print(text)
        print(f"checks missed (beyond {TOLERANCE:.0%}): {len(missed)}\n")
    left_out = each_shape_left_out(vulkan)
    print("== vulkan, each calibration shape estimated by a calibration fitted without it")
    lines, misses = [], 0
    for point, fitted in left_out:
        text, miss = table([point], fitted)
        lines.append(text.splitlines()[1])
        misses += len(miss)
    print("\n".join([HEADER, *lines]))
    print(f"missed (beyond {TOLERANCE:.0%}): {misses} of {len(left_out)}\n")
    for name, points in other_machine_points().items():
        text, missed = table(points, calibrations["vulkan"])
        print(f"== vulkan on another machine of the kind: {name}")
        print(text)
        print(f"missed (beyond {TOLERANCE:.0%}): {len(missed)} of {len(points)}")
        shared = machine_ratios(vulkan, points)
        if shared:
            print("the same figures on the calibration's machine: this one's over that one's")
            for here, _, ratio in shared:
                print(f"  {here.label:<24} {here.kind:<8} {here.depth:>6} {ratio:6.2f}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
