"""The memory plan of a stack: its config and lock turned into planner inputs."""

# Over ~400 lines: the llama.cpp, vLLM and fleet planner inputs live here until infra/plan is
# split by concern.
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from components.llamacpp.flags import rollback_planes
from components.llamacpp.inputs import LOAD_MARGIN, startup_threshold_needed
from components.payloads.fetcher import retire_pattern_problem
from components.payloads.tune_figures import DecodeCeiling
from infra.config import ConfigError, FleetStack, StrixHaloStack, quantity_value
from infra.config.base import RepoModelSettings
from infra.config.docker_host import Mi300xStack
from infra.config.fleet import entry_key
from infra.config.kubernetes import structure_problems
from infra.devices import DeviceFigures, decode_ceiling, device_figures
from infra.lock import ModelSource
from infra.plan.architectures import without_unloaded_layers
from infra.plan.deepseek4 import attention_shape, kv_layout
from infra.plan.extra_args import extra_args_problems, rope_options, with_extra_args
from infra.plan.llamacpp import (
    DEFAULT_CACHE_RAM_MIB,
    LlamaCppPlanInputs,
    ModelWeights,
    RpcDevice,
    WeightSource,
    plan_llamacpp,
)
from infra.plan.llamacpp_compute import compute_estimate
from infra.plan.llamacpp_inputs import DraftPlan
from infra.plan.llamacpp_placement import kv_layers
from infra.plan.llamacpp_speed import llamacpp_speed
from infra.plan.report import GB, GIB, MIB, Device, Fix, Plan, TableRow
from infra.plan.speed import active_share
from infra.plan.vllm import VllmPlanInputs, plan_vllm, vllm_speed
from infra.plan.vllm_extra_args import vllm_extra_args_problems
from infra.plan.vllm_kv import kv_layout_of

# Before a lock records the files' sizes the plan takes the weight size from the config.
NO_WEIGHT_SIZE = (
    "model.sizeGib: required until the model is locked (the plan needs the weight size; run: "
    "llm-infra lock STACK, or set model.sizeGib)"
)


def _same(stack_value: Any, header_value: Any) -> bool:
    """Whether a stack file's metadata value states the header's (a float as float32 holds it)."""
    if isinstance(stack_value, list) and isinstance(header_value, list):
        return len(stack_value) == len(header_value) and all(
            _same(a, b) for a, b in zip(stack_value, header_value, strict=True)
        )
    numbers = (int, float)
    if isinstance(stack_value, numbers) and isinstance(header_value, numbers):
        return math.isclose(stack_value, header_value, rel_tol=1e-6)
    return bool(stack_value == header_value)


@dataclass(frozen=True)
class ModelStructure:
    """What the plan knows of a GGUF model: from its header (the lock's summary, or `--gguf`),
    else from the stack file's model.architecture, model.layers, model.metadata and sizes."""

    architecture: str
    layers: int
    metadata: dict[str, Any]
    vocab_size: int | None
    weights: ModelWeights


def model_structure(
    stack: StrixHaloStack,
    source: ModelSource,
    header_summary: Mapping[str, Any] | None = None,
) -> ModelStructure:
    """The model's structure, one source of truth: the header wherever there is one (the stack
    file need not repeat it, and where it does the two must agree), the stack file before."""
    model = stack.model
    summary = header_summary or source.gguf
    problems = []
    if summary is not None:
        where = "the GGUF header" if header_summary else "the locked GGUF header"
        architecture: str = summary["architecture"]
        header: Mapping[str, Any] = summary["metadata"]
        block_count = header.get(f"{architecture}.block_count")
        layers = block_count if isinstance(block_count, int) else len(summary["layer_bytes"])
        if model.architecture is not None and model.architecture != architecture:
            problems.append(
                f"model.architecture: {model.architecture!r}, but {where} says {architecture!r} "
                "(remove the key: the lock's header decides)"
            )
        if model.layers is not None and model.layers != layers:
            problems.append(
                f"model.layers: {model.layers}, but {where} says {layers} "
                f"({architecture}.block_count; remove the key: the lock's header decides)"
            )
        for key, value in model.metadata.items():
            if key in header and not _same(value, header[key]):
                problems.append(
                    f"model.metadata: {key} is {value!r}, but {where} says {header[key]!r} "
                    "(remove the key: the lock's header decides)"
                )
        label: WeightSource = "GGUF header" if header_summary else "lock summary"
        weights = ModelWeights.from_summary(summary, label)
        metadata = {**model.metadata, **header}
        vocab = summary.get("vocab_size")
    else:
        unlocked = "required until the model is locked (run: llm-infra lock STACK, which reads it "
        if model.architecture is None:
            problems.append(
                f"model.architecture: {unlocked}from the GGUF header; or set it, e.g. llama)"
            )
        if model.layers is None:
            problems.append(f"model.layers: {unlocked}from the GGUF header's block_count)")
        if problems:
            raise ConfigError(problems)
        assert model.architecture is not None and model.layers is not None
        architecture, layers = model.architecture, model.layers
        sizes = [f.get("size") for f in source.files]
        if sizes and all(size is not None for size in sizes):
            total = sum(size or 0 for size in sizes)
        elif model.size_gib is not None:
            total = int(model.size_gib * GIB)
        else:
            raise ConfigError([NO_WEIGHT_SIZE])
        weights = ModelWeights.from_file_sizes(total, layers)
        metadata = dict(model.metadata)
        vocab = None
    metadata.setdefault(f"{architecture}.block_count", layers)
    problems += structure_problems(
        stack.server,
        architecture,
        layers,
        metadata,
        from_header=weights.source != "file sizes + layer structure",
    )
    if problems:
        raise ConfigError(problems)
    return ModelStructure(architecture, layers, metadata, vocab, weights)


@dataclass(frozen=True)
class ServedContext:
    """What a slot can hold: the trained context, or YaRN's extension of its native one."""

    tokens: int
    native: int
    """The context the extension scales (`--yarn-orig-ctx`, the header's original context
    length, else the trained one)."""
    yarn: bool


def served_context(stack: StrixHaloStack, structure: ModelStructure) -> ServedContext | None:
    """Tokens a slot can serve: `{arch}.context_length`, or with YaRN configured (in the header
    or server.extraArgs, with a scale of its own) `yarn-orig-ctx / rope-freq-scale`, as
    llama.cpp b11434 re-adjusts n_ctx_train (src/llama-context.cpp, "custom YaRN scaling
    detected"); llama-server caps every slot at it. None: the header does not say."""
    arch, meta = structure.architecture, structure.metadata
    trained = meta.get(f"{arch}.context_length")
    if not isinstance(trained, int) or isinstance(trained, bool) or trained <= 0:
        return None
    rope = rope_options(stack.server.extra_args)
    header_orig = meta.get(f"{arch}.rope.scaling.original_context_length")
    native = header_orig if isinstance(header_orig, int) and header_orig > 0 else trained
    try:
        if rope.get("--yarn-orig-ctx") and int(rope["--yarn-orig-ctx"]) > 0:
            native = int(rope["--yarn-orig-ctx"])
        if "--rope-freq-scale" in rope:
            freq = float(rope["--rope-freq-scale"])
        elif "--rope-scale" in rope:
            freq = 1.0 / float(rope["--rope-scale"])
        else:
            return ServedContext(trained, native, False)
    except (ValueError, ZeroDivisionError):
        return ServedContext(trained, native, False)
    scaling = rope.get("--rope-scaling", meta.get(f"{arch}.rope.scaling.type"))
    factor = meta.get(f"{arch}.rope.scaling.factor")
    trained_freq = 1.0 / factor if isinstance(factor, int | float) and factor > 0 else 1.0
    if scaling != "yarn" or freq <= 0 or freq == trained_freq:
        return ServedContext(trained, native, False)
    return ServedContext(int(native / freq), native, True)


def context_problems(stack: StrixHaloStack, structure: ModelStructure) -> list[str]:
    """A slot context above what the model serves: llama-server would cap it, and the KV
    cache beyond the cap would be memory spent for nothing."""
    server = stack.server
    served = served_context(stack, structure)
    cells = kv_layout(server.context_size, server.parallel, False).cells
    if served is None or cells <= served.tokens:
        return []
    tokens, arch = served.tokens, structure.architecture
    slots = f"each of the {server.parallel} slots" if server.parallel > 1 else "its one slot"
    fixes = [f"lower server.contextSize to {tokens * server.parallel}"]
    if tokens < server.min_slot_context:
        fixes = [
            f"lower server.minSlotContext to {tokens} and server.contextSize to "
            f"{tokens * server.parallel} (server.minSlotContext {server.min_slot_context} is "
            "more than the model serves)"
        ]
    scale = math.ceil(cells / served.native)
    fixes.append(
        f"{'raise the YaRN scale' if served.yarn else 'extend it with YaRN'} in server.extraArgs: "
        f"--rope-scaling yarn --rope-scale {scale} --yarn-orig-ctx {served.native}"
    )
    what = (
        f"the {tokens} tokens its YaRN settings serve (server.extraArgs)"
        if served.yarn
        else f"the model's trained context {tokens} ({arch}.context_length)"
    )
    return [
        f"server.contextSize: {server.context_size} gives {slots} {cells} tokens, more than "
        f"{what}: llama-server caps a slot there and the rest of the KV cache is never used; "
        f"{' or '.join(fixes)}"
    ]


def llamacpp_inputs(
    stack: StrixHaloStack,
    source: ModelSource,
    header_summary: Mapping[str, Any] | None = None,
    structure: ModelStructure | None = None,
) -> LlamaCppPlanInputs:
    """Planner inputs; weights from a GGUF header at hand, else the lock, else the config
    (`structure`: the model's, when the caller has it already)."""
    server, memory = stack.server, stack.memory
    retire = retire_problems(stack, source)
    if retire:
        raise ConfigError(retire)
    if structure is None:
        structure = model_structure(stack, source, header_summary)
    weights, metadata = structure.weights, structure.metadata
    context = context_problems(stack, structure)
    if context:
        raise ConfigError(context)
    served = served_context(stack, structure)
    runtime = server.effective_runtime
    # A runtime without a GPU (cpu) plans every layer on the host, whatever memory.vramGib says.
    gpu = runtime.uses_gpu and memory.vram_gib is not None
    compute = {"vram": int(memory.compute_gib * GIB)} if memory.compute_gib is not None else {}
    try:
        attention = attention_shape(structure.architecture, metadata, structure.vocab_size)
    except ValueError as exc:
        # What the plan needs and neither the lock nor model.metadata gives.
        raise ConfigError([f"model.metadata: {exc} (lock the model, or add the key)"]) from None
    except ArithmeticError as exc:
        # A zero where the shape divides (a head count of 0): no model has that structure.
        raise ConfigError(
            [f"model.metadata: {exc} in the attention shape (a head count or length of 0?)"]
        ) from None
    spec = server.speculative
    inputs = LlamaCppPlanInputs(
        weights=weights,
        attention=attention,
        gpu_layers=server.gpu_layers,
        ctx_size=server.context_size,
        parallel=server.parallel,
        cache_type_k=server.cache_type_k,
        cache_type_v=server.cache_type_v,
        vram_bytes=int(memory.vram_gib * GIB) if gpu and memory.vram_gib is not None else None,
        memory_limit_bytes=int(quantity_value(server.resources.limits.memory)),
        node_ram_bytes=None if memory.node is None else int(memory.node.pod_gib * GIB),
        carve_out_bytes=None
        if memory.node is None or not memory.node.carve_out_gib
        else int(memory.node.carve_out_gib * GIB),
        cache_ram_mib=server.cache_ram if server.cache_ram is not None else DEFAULT_CACHE_RAM_MIB,
        compute_override_bytes=compute,
        disk_bytes=int(quantity_value(stack.store.size)),
        upgrade_keeps_old_model=stack.store.upgrade == "keep",
        rpc_devices=rpc_devices(stack),
        cpu_variant=memory.cpu_variant,
        repack=server.repack,
        n_rs_seq=0 if spec is None else rollback_planes(spec.method, spec.num_speculative_tokens),
        speculative=None if spec is None else spec.method,
        min_slot_context=server.min_slot_context,
        context_limit=served.tokens if served else None,
        runtime=runtime.name,
        gpu_device=f"{runtime.device_prefix or 'CPU'}0",
        compute_estimate=runtime.compute_estimate,
    )
    inputs = without_unloaded_layers(inputs, structure.architecture, metadata)
    inputs = with_extra_args(inputs, server.extra_args, header_summary or source.gguf)
    if spec is not None and spec.draft is not None:
        inputs = replace(inputs, draft=draft_plan(inputs, spec.draft, source.draft))
    return inputs


def draft_plan(
    target: LlamaCppPlanInputs, draft: RepoModelSettings, source: ModelSource | None
) -> DraftPlan:
    """The speculative draft as the target's server holds it: its weights, and, from its
    locked header, its KV cache at the target's context and its compute buffer."""
    summary = source.gguf if source is not None else None
    sizes = [f.get("size") for f in source.files] if source is not None else []
    if sizes and all(size is not None for size in sizes):
        files = sum(size or 0 for size in sizes)
    elif draft.size_gib is not None:
        files = int(draft.size_gib * GIB)
    else:
        raise ConfigError(
            [
                "server.speculative.draft.sizeGib: required until the draft is locked (run: "
                "llm-infra lock STACK, which records its files' sizes and GGUF header)"
            ]
        )
    if summary is None:
        return DraftPlan(files, None, 0, files)
    weights = ModelWeights.from_summary(summary, "lock summary")
    shape = attention_shape(summary["architecture"], summary["metadata"], summary.get("vocab_size"))
    own = replace(
        target,
        weights=weights,
        attention=shape,
        cache_type_k="f16",
        cache_type_v="f16",
        n_rs_seq=0,
        draft=None,
    )
    return DraftPlan(
        weight_bytes=weights.total_bytes,
        kv_bytes=sum(kv_layers(own).total),
        compute_bytes=compute_estimate(own),
        file_bytes=files,
    )


def rpc_devices(stack: StrixHaloStack) -> tuple[RpcDevice, ...]:
    """The RPC workers' GPUs of a split model, in `--rpc` order (empty without rpc)."""
    rpc = stack.server.rpc
    if rpc is None:
        return ()
    return tuple(
        RpcDevice(
            name=name,
            vram_bytes=int(worker.vram_gib * GIB),
            compute_override_bytes=None
            if worker.compute_gib is None
            else int(worker.compute_gib * GIB),
        )
        for worker, name in zip(rpc.workers, stack.server.rpc_worker_names, strict=True)
    )


def retire_problems(stack: StrixHaloStack, source: ModelSource) -> list[str]:
    """Retired patterns that would delete a file of the model the lock resolved (the config's
    own checks cover exact `model.files`): the disk plan never counts those as reclaimable."""
    names = [f["name"] for f in source.files]
    problems = []
    for index, pattern in enumerate(stack.store.retired_patterns):
        problem = retire_pattern_problem(pattern, names)
        if problem:
            problems.append(f"store.retiredPatterns[{index}]: {problem}")
    return problems


def vllm_inputs(stack: Mi300xStack, source: ModelSource) -> VllmPlanInputs:
    """Planner inputs of a vLLM host: every weight in HBM, the CPU KV tier in host RAM."""
    sizes = [f.get("size") for f in source.files]
    if sizes and all(size is not None for size in sizes):
        weights = sum(size or 0 for size in sizes)
    elif stack.model.size_gib is not None:
        weights = int(stack.model.size_gib * GIB)
    else:
        raise ConfigError([NO_WEIGHT_SIZE])
    memory, server = stack.memory, stack.server
    return VllmPlanInputs(
        weights_bytes=weights,
        hbm_bytes=int(memory.hbm_gib * GIB),
        kv_cache_memory_bytes=server.kv_cache_memory_bytes,
        max_model_len=server.max_model_len,
        max_num_batched_tokens=server.max_num_batched_tokens,
        kv_layout=kv_layout_of(stack.model.repo),
        activation_reserve_bytes=int(memory.activation_reserve_gib * GIB),
        host_ram_bytes=int(memory.ram_gib * GIB),
        cpu_kv_tier_bytes=int(server.kv_offloading_size * GIB),
        host_runtime_bytes=int(memory.runtime_gib * GIB),
        disk_bytes=int(memory.disk_gb * GB),
        image_bytes=int(memory.image_gb * GB),
    )


def vllm_plan(stack: Mi300xStack, source: ModelSource) -> Plan:
    """A docker-host stack's memory plan (vLLM's HBM, host RAM and disk)."""
    inputs = vllm_inputs(stack, source)
    plan = plan_vllm(inputs)
    refused = vllm_extra_args_problems(stack.server.extra_args)
    plan = replace(plan, problems=[*plan.problems, *refused]) if refused else plan
    figures = stack_device(stack.memory.device)
    if figures is None:
        return plan
    return replace(plan, speed=vllm_speed(inputs, plan, figures[0]))


def llamacpp_plan(
    stack: StrixHaloStack, source: ModelSource, header_summary: Mapping[str, Any] | None = None
) -> Plan:
    """A single llama.cpp server's memory plan (`header_summary`: a GGUF header read instead of
    the lock's)."""
    structure = model_structure(stack, source, header_summary)
    inputs = llamacpp_inputs(stack, source, header_summary, structure)
    try:
        plan = plan_llamacpp(inputs)
    except (ValueError, ArithmeticError) as exc:
        # A layer structure llama.cpp would refuse too (an odd compression ratio, a head size
        # that is not a whole number of blocks): the metadata is wrong, not the planner.
        raise ConfigError([f"model.metadata: {exc}"]) from None
    # What server.extraArgs change that the plan cannot count: refused, never ignored.
    extra = extra_args_problems(stack.server.extra_args, header_summary or source.gguf)
    plan = replace(
        plan,
        problems=[*plan.problems, *extra],
        load_seconds=load_seconds(stack, inputs, plan),
        probe_problems=probe_problems(stack, inputs, plan),
    )
    figures = stack_device(stack.memory.device)
    if figures is None:
        return plan
    speed = llamacpp_speed(
        inputs, structure.metadata, structure.architecture, *figures, stack.server.threads
    )
    return replace(plan, speed=speed)


def physical_ceiling(stack: StrixHaloStack, source: ModelSource) -> DecodeCeiling | None:
    """The decode ceiling no runtime of this server passes: the active weight bytes of a token
    read at the fastest bandwidth of the stack's device and its host (None: no device)."""
    figures = stack_device(stack.memory.device)
    if figures is None:
        return None
    device, host = figures
    structure = model_structure(stack, source)
    arch, metadata = structure.architecture, structure.metadata
    if active_share(metadata, arch) is None and f"{arch}.expert_used_count" in metadata:
        # A mixture of experts whose share of active bytes is unknown: its every byte counted
        # is a floor on the speed, not a ceiling.
        return None
    speed = llamacpp_speed(
        llamacpp_inputs(stack, source, structure=structure),
        structure.metadata,
        structure.architecture,
        device,
        host,
        stack.server.threads,
    )
    if isinstance(speed, str):
        return None
    fastest = max(device.bandwidth_gbps, host.bandwidth_gbps if host else 0)
    ceiling = decode_ceiling(fastest, speed.bytes_per_token)
    return DecodeCeiling(
        ceiling,
        f"{fastest:g} GB/s of {device.label} / {speed.bytes_per_token / GIB:.3g} GiB a token",
    )


def stack_device(settings: Any) -> tuple[DeviceFigures, DeviceFigures | None] | None:
    """The device table's entry a stack names (`memory.device`), with its overrides."""
    if settings is None:
        return None
    return device_figures(
        settings.name,
        bandwidth_gbps=settings.bandwidth_gbps,
        tflops=settings.tflops,
        host_bandwidth_gbps=settings.host_bandwidth_gbps,
    )


def fleet_plan(
    fleet: FleetStack,
    sources: list[ModelSource],
    header_summary: Mapping[str, Any] | None = None,
) -> Plan:
    """Every server's plan in one: each server's devices as `vram:<server>`, `ram:<server>`,
    `disk:<server>` (RPC workers keep `vram:<worker>`), its lines naming its `servers[i]` key."""
    devices: dict[str, Device] = {}
    rows: list[TableRow] = []
    advice: list[str] = []
    problems: list[str] = []
    notes: list[str] = []
    transfers: dict[str, int] = {}
    kinds: list[str] = []
    fixes: list[Fix] = []
    assumptions: list[str] = []
    probes: list[str] = []
    servers: list[Plan] = []
    for index, (entry, stack) in enumerate(zip(fleet.servers, fleet.server_stacks(), strict=True)):
        own_memory = entry.memory is not None
        try:
            plan = llamacpp_plan(stack, sources[index], header_summary)
        except ConfigError as exc:
            raise ConfigError([entry_key(p, index, own_memory) for p in exc.problems]) from None
        servers.append(plan)
        probes += [entry_key(p, index, own_memory) for p in plan.probe_problems]
        name = stack.server.resource_name
        for device, budget in plan.devices.items():
            devices[device if ":" in device else f"{device}:{name}"] = budget
        rows += [TableRow(f"{name}: {r.component}", r.size_bytes, r.where) for r in plan.rows]
        problems += [entry_key(f"{p} [{name}]", index, own_memory) for p in plan.problems]
        advice += [entry_key(a, index, own_memory) for a in plan.advice]
        fixes += [
            Fix(
                {entry_key(k, index, own_memory): v for k, v in fix.changes.items()},
                entry_key(fix.text, index, own_memory),
            )
            for fix in plan.fixes
        ]
        assumptions += [f"{name}: {a}" for a in plan.assumptions]
        notes += [f"{name}: {n}" for n in plan.notes]
        transfers.update(plan.transfers)
        kinds.append(f"{name}: {plan.source}")
    return Plan(
        devices, advice, problems, rows, notes, "; ".join(kinds), transfers, assumptions, fixes,
        probe_problems=probes, servers=tuple(servers),
    )  # fmt: skip


def load_seconds(
    stack: StrixHaloStack, inputs: LlamaCppPlanInputs, plan: Plan | None = None
) -> float:
    """Estimated time from container start to a loaded model (a split model: plus sending the
    workers their weights, as `plan` of these inputs sends them; planned here without one)."""
    read = inputs.weights.total_bytes / (stack.memory.disk_read_mibps * MIB)
    rpc = stack.server.rpc
    if rpc is not None:
        sent = sum((plan or plan_llamacpp(inputs)).transfers.values())
        read += sent / (rpc.network_mibps * MIB)
    return read + stack.memory.init_seconds


def probe_problems(
    stack: StrixHaloStack, inputs: LlamaCppPlanInputs, plan: Plan | None = None
) -> list[str]:
    """A startup probe that would kill the server while it is still loading (`plan`: these
    inputs' plan, when the caller has it)."""
    seconds = load_seconds(stack, inputs, plan)
    startup = stack.server.probes.startup
    threshold = startup_threshold_needed(
        {
            "path": startup.path,
            "initial_delay_seconds": startup.initial_delay_seconds,
            "period_seconds": startup.period_seconds,
            "failure_threshold": startup.failure_threshold,
            "timeout_seconds": startup.timeout_seconds,
        },
        seconds,
    )
    if threshold is None:
        return []
    rpc = stack.server.rpc
    network = (
        f" (and to the workers at server.rpc.networkMibps {rpc.network_mibps:g})" if rpc else ""
    )
    return [
        f"server.probes.startup: allows {startup.window_seconds}s, but loading "
        f"{inputs.weights.total_bytes / GIB:.1f} GiB at memory.diskReadMibps "
        f"{stack.memory.disk_read_mibps:g} MiB/s{network} plus {stack.memory.init_seconds}s of "
        "start-up "
        f"takes ~{seconds:.0f}s: raise failureThreshold to at least "
        f"{threshold} (x{LOAD_MARGIN} margin)"
    ]
