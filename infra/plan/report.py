"""The plan output contract: devices and their items, the text table, refusals; byte units."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.plan.speed import SpeedEstimate

GIB = 1 << 30
MIB = 1 << 20
GB = 10**9


class PlanError(ValueError):
    """A stack whose plan does not fit: one line per device, each with the numbers and a fix."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def gib(value: float) -> float:
    """Bytes as GiB."""
    return value / GIB


def fmt_size(value_bytes: float) -> str:
    """A size for people: GiB above 1 GiB, else MiB."""
    if abs(value_bytes) >= GIB:
        return f"{value_bytes / GIB:.1f} GiB"
    return f"{value_bytes / MIB:.0f} MiB"


def fmt_num(value: float) -> str:
    """A number for people: integers without a fraction, else one decimal."""
    return f"{value:g}" if float(value).is_integer() else f"{value:.1f}"


@dataclass(frozen=True)
class Device:
    """One budget: a capacity and what is placed in it."""

    capacity_bytes: int | None
    items: dict[str, int]
    layers: str | None = None
    """The model layers the device holds (`layers 22-42 + output`), where that applies."""

    @property
    def used_bytes(self) -> int:
        """Sum of the items."""
        return sum(self.items.values())

    @property
    def fits(self) -> bool:
        """Whether the items fit the capacity (an unknown capacity fits)."""
        return self.capacity_bytes is None or self.used_bytes <= self.capacity_bytes

    def to_json(self) -> dict[str, Any]:
        """The plan contract's device object, in GiB."""
        capacity = self.capacity_bytes
        return {
            "capacity_gib": None if capacity is None else round(gib(capacity), 3),
            "used_gib": round(gib(self.used_bytes), 3),
            "free_gib": None if capacity is None else round(gib(capacity - self.used_bytes), 3),
            "items": {k: round(gib(v), 3) for k, v in self.items.items()},
        }


@dataclass(frozen=True)
class Fix:
    """One change the plan advises, as stack keys (dotted, as a stack file spells them) and their
    new values, checked to hold: applied, the stack passes its checks and fits."""

    changes: dict[str, Any]
    text: str

    def to_json(self) -> dict[str, Any]:
        """`{"set": {key: value}, "text": ...}`."""
        return {"set": dict(self.changes), "text": self.text}


@dataclass(frozen=True)
class KvCapacity:
    """What a server's KV cache holds in tokens: the GPU budget at `max_model_len` as the
    server counts it at start-up, and a CPU tier; the token figures are None where the plan
    knows no KV bytes per token for the model."""

    max_model_len: int
    gpu_budget_bytes: int
    cpu_tier_bytes: int
    gpu_tokens: int | None = None
    max_concurrency: float | None = None
    """Requests of `max_model_len` tokens the GPU budget holds at once."""
    request_bytes: int | None = None
    bytes_per_token: float | None = None
    cpu_tier_tokens: int | None = None
    longest_context: int | None = None
    """The longest context of which one request fits the GPU budget."""

    def lines(self) -> list[str]:
        """The plan's KV lines: what each figure counts."""
        budget = f"{gib(self.gpu_budget_bytes):.2f} GiB of --kv-cache-memory-bytes"
        if self.gpu_tokens is None or self.max_concurrency is None:
            return [
                f"KV cache: {budget}; its tokens are not counted (the plan knows no KV bytes "
                "per token for this model)"
            ]
        lines = [
            f"GPU KV cache: {self.gpu_tokens:,} tokens ({budget}; "
            f"{self.bytes_per_token or 0:,.0f} B a context token)",
            f"concurrency: {self.max_concurrency:.2f} requests of {self.max_model_len:,} tokens "
            f"at once ({gib(self.request_bytes or 0):.2f} GiB each, sliding window included)",
        ]
        if self.cpu_tier_bytes:
            lines.append(
                f"CPU KV tier: {self.cpu_tier_tokens or 0:,} tokens of prefix cache moved out "
                f"of HBM ({gib(self.cpu_tier_bytes):.2f} GiB of --kv-offloading-size; running "
                "requests stay in HBM, so it adds no concurrency)"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        """The plan contract's `kv_cache` object (sizes in GiB)."""

        def size(value: int | None) -> float | None:
            return None if value is None else round(gib(value), 3)

        concurrency = self.max_concurrency
        return {
            "max_model_len": self.max_model_len,
            "gpu_budget_gib": size(self.gpu_budget_bytes),
            "gpu_tokens": self.gpu_tokens,
            "max_concurrency": None if concurrency is None else round(concurrency, 2),
            "request_gib": size(self.request_bytes),
            "bytes_per_token": None
            if self.bytes_per_token is None
            else round(self.bytes_per_token, 2),
            "cpu_tier_gib": size(self.cpu_tier_bytes),
            "cpu_tier_tokens": self.cpu_tier_tokens,
        }


@dataclass(frozen=True)
class TableRow:
    """One line of the plan table."""

    component: str
    size_bytes: int
    where: str


@dataclass(frozen=True)
class Plan:
    """A memory/disk plan: devices with their items, advice, and the rows of its table."""

    devices: dict[str, Device]
    advice: list[str]
    problems: list[str]
    """Refusal lines (`plan: does not fit in ...`); empty when the plan fits."""
    rows: list[TableRow]
    notes: list[str]
    source: str
    transfers: dict[str, int] = field(default_factory=dict)
    """Bytes sent over the network at load, by receiver (the weights of each RPC worker)."""
    assumptions: list[str] = field(default_factory=list)
    """Values the plan took from a default instead of the GGUF header or the stack, each with
    what rests on it."""
    fixes: list[Fix] = field(default_factory=list)
    """The changes the problems and advice name, machine-readable (`--json`: `fixes`)."""
    kv: KvCapacity | None = None
    """What the KV cache holds in tokens (a vLLM server; `--json`: `kv_cache`)."""
    speed: SpeedEstimate | str | None = None
    """The decode and prefill estimate (`memory.device`), or why there is none (`--json`:
    `speed`); None: no device named."""
    tensor_split: tuple[float, ...] | None = None
    """A split model's `--tensor-split`, each device's share as this plan placed the layers
    (None: no RPC workers); the server's flags take it from here."""
    load_seconds: float | None = None
    """Estimated time from container start to a loaded model (None: not estimated, vLLM)."""
    probe_problems: list[str] = field(default_factory=list)
    """A startup probe that would kill the server while it loads: refused whether or not
    `memory.check` is on (not in `problems`, so `plan` reports and `fits` leave it out)."""
    servers: tuple[Plan, ...] = ()
    """A fleet's plan: each server's own, in `servers:` order (empty for one server)."""

    def server_plans(self) -> list[Plan]:
        """Each server's own plan, in `servers:` order: a fleet's `servers`, else this one."""
        return list(self.servers) or [self]

    def speed_lines(self) -> list[str]:
        """The estimate's lines (empty without `memory.device`)."""
        if isinstance(self.speed, SpeedEstimate):
            return self.speed.lines()
        return [] if self.speed is None else [f"speed (estimate): {self.speed}"]

    @property
    def fits(self) -> bool:
        """Whether every device fits."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The plan output contract (`llm-infra plan --json`)."""
        document: dict[str, Any] = {
            "fits": self.fits,
            "devices": {name: device.to_json() for name, device in self.devices.items()},
            "advice": [*self.problems, *self.advice],
            "assumptions": list(self.assumptions),
            "fixes": [fix.to_json() for fix in self.fixes],
        }
        if self.kv is not None:
            document["kv_cache"] = self.kv.to_json()
        if isinstance(self.speed, SpeedEstimate):
            document["speed"] = self.speed.to_json()
        elif self.speed is not None:
            document["speed"] = {"estimate": False, "reason": self.speed}
        if self.transfers:
            document["network_load_gib"] = {
                name: round(gib(size), 3) for name, size in self.transfers.items()
            }
        return document

    def check(self) -> None:
        """Raise PlanError when the plan does not fit."""
        if self.problems:
            raise PlanError(self.problems)

    def table(self) -> str:
        """The budget as a text table (component, size, where), the totals and the verdict."""
        width = max([len(r.component) for r in self.rows] + [len("component")])
        lines = [f"{'component':<{width}}  {'size':>10}  where", "-" * (width + 24)]
        lines += [
            f"{r.component:<{width}}  {fmt_size(r.size_bytes):>10}  {r.where}" for r in self.rows
        ]
        lines.append("-" * (width + 24))
        for name, device in self.devices.items():
            capacity = device.capacity_bytes
            limit = "no limit" if capacity is None else f"of {fmt_size(capacity)}"
            free = "" if capacity is None else f", {fmt_size(capacity - device.used_bytes)} free"
            lines.append(
                f"{'total ' + name:<{width}}  {fmt_size(device.used_bytes):>10}  {limit}{free}"
            )
        lines += self.kv.lines() if self.kv is not None else []
        lines += self.speed_lines()
        lines.append(f"weights from: {self.source}")
        lines += [f"assumed: {a}" for a in self.assumptions]
        lines += [f"note: {n}" for n in self.notes]
        lines.append("verdict: fits" if self.fits else "verdict: DOES NOT FIT")
        lines += self.problems
        lines += [f"advice: {a}" for a in self.advice]
        return "\n".join(lines)

    def report(self, verbose: bool = False, width: int = 40) -> str:
        """What `llm-infra plan` prints: the verdict first, one bar per device, then the
        components that take space (one unit: GiB), and the notes when `verbose`."""
        over = {
            name: device.used_bytes - device.capacity_bytes
            for name, device in self.devices.items()
            if device.capacity_bytes is not None and device.used_bytes > device.capacity_bytes
        }
        if over:
            worst = ", ".join(f"{name} over by {gib(size):.1f} GiB" for name, size in over.items())
            lines = [f"verdict: DOES NOT FIT ({worst})", *self.problems]
        elif self.problems:
            # Refused without a device over capacity (an option the plan cannot count, AMX).
            lines = ["verdict: DOES NOT FIT", *self.problems]
        else:
            lines = ["verdict: fits"]
        lines += [f"advice: {a}" for a in self.advice]
        lines.append("")
        used = {symbol for d in self.devices.values() for k in d.items for symbol in _symbol(k)}
        for name, device in self.devices.items():
            lines.append(f"{name:<5} {_bar(device, width)}  {usage_text(device)}")
        legend = [f"{s} {k}" for k, s in _SYMBOLS.items() if s in used]
        lines.append(f"{'':<5} {'  '.join(legend)}  . free  ! over")
        lines.append("")
        shown = [r for r in self.rows if r.size_bytes > 0]
        name_width = max([len(r.component) for r in shown] + [len("component")])
        lines.append(f"{'component':<{name_width}}  {'GiB':>7}  where")
        lines += [
            f"{r.component:<{name_width}}  {gib(r.size_bytes):>7.2f}  {r.where}" for r in shown
        ]
        hidden = len(self.rows) - len(shown)
        if hidden:
            lines.append(f"({hidden} components of 0 GiB not shown)")
        if self.kv is not None:
            lines += ["", *self.kv.lines()]
        if self.speed is not None:
            lines += ["", *self.speed_lines()]
        lines.append(f"weights from: {self.source}")
        lines += [f"assumed: {a}" for a in self.assumptions]
        if verbose:
            lines += [f"note: {n}" for n in self.notes]
        elif self.notes:
            lines.append(f"({len(self.notes)} notes: -v shows them)")
        return "\n".join(lines)


_SYMBOLS = {
    "weights": "W",
    "kv_cache": "K",
    "compute": "C",
    "prompt_cache": "P",
    "runtime": "R",
    "model_files": "M",
    "reserve": "S",
    "draft": "D",
    "host_buffers": "H",
    "gpu_beyond_carve_out": "G",
}
"""The letter of each plan item in a device's bar (others: #)."""


def _symbol(item: str) -> str:
    return _SYMBOLS.get(item, "#")


def _bar(device: Device, width: int) -> str:
    """`[WWWWWWWWKCC....]`: each item's share of the device, free space as dots; a device that
    is over its capacity is scaled to its use and the part beyond capacity shows as `!`."""
    capacity = device.capacity_bytes
    scale = max(device.used_bytes, capacity or 0, 1)
    cells = ""
    for item, size in device.items.items():
        cells += _symbol(item) * round(width * size / scale)
    cells = cells[:width]
    if capacity is not None and device.used_bytes > capacity:
        keep = round(width * capacity / scale)
        cells = cells[:keep] + "!" * (len(cells) - keep)
    return "[" + cells.ljust(width, ".") + "]"


def usage_text(device: Device) -> str:
    """`81.1/90.0 GiB  8.9 GiB free` (or `over by X GiB`): a device's use, as its bar shows it."""
    capacity = device.capacity_bytes
    if capacity is None:
        return f"{gib(device.used_bytes):.1f} GiB (no limit)"
    text = f"{gib(device.used_bytes):.1f}/{gib(capacity):.1f} GiB"
    if device.used_bytes > capacity:
        return f"{text}  over by {gib(device.used_bytes - capacity):.1f} GiB"
    return f"{text}  {gib(capacity - device.used_bytes):.1f} GiB free"
