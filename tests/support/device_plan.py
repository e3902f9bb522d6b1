"""The plan's per-device figures beside the buffers a llama-server load log shows.

For a stack and a model at hand: the stack's memory plan (its `-ngl`, `-c`, `-np`, cache types,
the planner of `infra.plan`) with the weights and attention shape read from the model's own GGUF
headers, and the model, KV and compute buffers one real load logged per device
(`components.payloads.gpu_gate.parse_load_log`). GPU buffer types (`Vulkan0`, ...) are the
plan's `vram`; host buffer types (`CPU`, `CPU_Mapped`, `Vulkan_Host`, ...) its `ram`.

`bench/plan_vs_device.py` prints the comparison for the real Vulkan load logs under
`tests/fixtures/gpu_gate/`; `tests/contract/test_plan_vs_device.py` holds the plan to them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from components.payloads.gpu_gate import LoadEvidence, is_host_buffer, parse_load_log
from infra.config import KubernetesStack, parse_stack
from infra.config.stack import namespace_values, read_stack_file
from infra.lock import model_source
from infra.plan.deepseek4 import attention_shape
from infra.plan.llamacpp import LlamaCppPlanInputs, plan_llamacpp
from infra.plan.report import MIB
from infra.plan.stack import llamacpp_inputs
from tests.support.tiny_gguf import header_summary

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu_gate"
KINDS = ("weights", "kv_cache", "compute")
"""The plan items a load log has a buffer line for."""
DEVICES = ("vram", "ram")


def stack_plan_inputs(stack_name: str, shards: list[Path]) -> LlamaCppPlanInputs:
    """The stack's planner inputs with the weights and attention of the model at hand.

    The compute buffers are the planner's estimate: a measured `memory.computeGib` belongs to the
    stack's own model, not to the one at hand."""
    summary = header_summary(shards)
    stack_file = read_stack_file(stack_name)
    values = namespace_values(stack_file.config)
    # The model at hand's header decides its structure: the stack's own model keys would
    # contradict it. Its -ngl as llama.cpp clamps it to a smaller model (all layers + output).
    for key in ("architecture", "layers", "sizeGib", "metadata"):
        values["model"].pop(key, None)
    n_layer = len(summary["layer_bytes"])
    values["server"]["gpuLayers"] = min(values["server"]["gpuLayers"], n_layer + 1)
    # The logs ran the stack's -c on tiny models trained for fewer tokens (llama-server caps
    # the slots, the cache is allocated in full): planned at a context the checks accept, then
    # at the stack's.
    context = values["server"]["contextSize"]
    trained = summary["metadata"].get(f"{summary['architecture']}.context_length")
    if isinstance(trained, int) and trained < context:
        slots = values["server"].get("parallel", 1)
        values["server"].update(contextSize=trained, minSlotContext=trained // slots)
    stack = parse_stack(values)
    if not isinstance(stack, KubernetesStack):
        raise TypeError(f"{stack_name} is not a llama.cpp stack")
    source = model_source(stack.model, Path(stack_file.config["llm-infra:lockFile"]), True)
    inputs = llamacpp_inputs(stack, source, summary)
    # The attention of the model at hand (the stack's own architecture may differ).
    shape = attention_shape(summary["architecture"], summary["metadata"], summary.get("vocab_size"))
    return dataclasses.replace(
        inputs, attention=shape, compute_override_bytes={}, ctx_size=context, context_limit=None
    )


def planned_mib(inputs: LlamaCppPlanInputs) -> dict[str, dict[str, float]]:
    """Plan device → item → MiB, for the items a load log shows."""
    plan = plan_llamacpp(inputs)
    return {
        device: {kind: plan.devices[device].items.get(kind, 0) / MIB for kind in KINDS}
        for device in DEVICES
        if device in plan.devices
    }


def logged_mib(evidence: LoadEvidence) -> dict[str, dict[str, float]]:
    """Plan device → item → MiB, summed over the buffer types a load log shows."""
    sums = {device: dict.fromkeys(KINDS, 0.0) for device in DEVICES}
    tables = {
        "weights": {**evidence.gpu_buffers_mib, **evidence.host_buffers_mib},
        "kv_cache": evidence.kv_buffers_mib,
        "compute": evidence.compute_buffers_mib,
    }
    for kind, table in tables.items():
        for buffer_type, mib in table.items():
            sums["ram" if is_host_buffer(buffer_type) else "vram"][kind] += mib
    return sums


@dataclass(frozen=True)
class Row:
    """One device and item: the plan's MiB and the log's."""

    device: str
    kind: str
    planned: float
    logged: float

    @property
    def ratio(self) -> float | None:
        """Plan over log (None where the log shows nothing)."""
        return self.planned / self.logged if self.logged > 0 else None


def compare(stack_name: str, shards: list[Path], log: Path) -> list[Row]:
    """Plan vs log, per device and item."""
    planned = planned_mib(stack_plan_inputs(stack_name, shards))
    logged = logged_mib(parse_load_log(log.read_text(errors="replace")))
    return [
        Row(device, kind, planned.get(device, {}).get(kind, 0.0), logged[device][kind])
        for device in DEVICES
        for kind in KINDS
    ]


def format_rows(name: str, rows: list[Row]) -> str:
    """A table of one model's comparison."""
    head = ("model", "device", "item", "plan MiB", "log MiB", "plan/log")
    lines = ["{:<10} {:<6} {:<9} {:>10} {:>10} {:>9}".format(*head)]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        lines.append(
            f"{name:<10} {r.device:<6} {r.kind:<9} {r.planned:10.2f} {r.logged:10.2f} {ratio:>9}"
        )
    return "\n".join(lines)
