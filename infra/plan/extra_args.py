"""What llama-server extra arguments (`server.extraArgs`) do to the memory plan: counted or refused.

Every option of llama-server b11434's table (`components/llamacpp/llama_server_options.json`)
is classified here once (a unit test keeps the classes and the table equal), so a new option
of a new build cannot slip past the plan:

- counted: `-b`/`-ub` (compute buffers and the KV cells a ubatch needs), `-fa`, `-kvu`,
  `--swa-full` (the plan's own settings), and the tensor overrides `-ot PATTERN=CPU`,
  `--cpu-moe`, `--n-cpu-moe N`, `--n-cpu-ffn N`, which keep the matching tensors' bytes in host
  RAM instead of their layer's GPU. The tensors are matched as llama.cpp b11434 does
  (`llama_model_loader::create_tensor`): each tensor name against the overrides in argv order,
  `std::regex_search`, the first that matches decides; `--cpu-moe` is
  `\\.ffn_(up|down|gate|gate_up)_(ch|)exps`, `--n-cpu-moe N` that regex behind `blk\\.I` for each
  layer I < N (`common/common.h`), `--n-cpu-ffn N` the dense `\\.ffn_(up|down|gate)\\.`. That
  needs every tensor's name and size: a lock's GGUF summary of schema 3.
- neutral: sampling, chat, logging, HTTP, threads: no memory the plan budgets.
- uncountable: anything else that changes memory (`--no-kv-offload`, a LoRA, a projector, a
  draft model, `--override-kv`, ...): the plan refuses the stack and says why.

The options the program renders itself never reach here: the component refuses them (a
neutral one may stay listed as neutral).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from components.extra_args import ExtraArg, llama_server_options, owned_spellings, parse_extra_args
from components.gguf_header import INPUT_TENSORS, tensor_key_bytes
from components.llamacpp.inputs import OWNED_OPTIONS, REFUSED_OPTIONS
from components.option_categories import LLAMA_SERVER_UNCOUNTABLE, PROJECTOR
from infra.plan.repack import MatmulWeight

UNCOUNTABLE = LLAMA_SERVER_UNCOUNTABLE
"""Options that change memory in ways the plan cannot count, each with the reason (the one
table of refusals: `components/option_categories.py`)."""

FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""llama.cpp b11434's `LLM_FFN_EXPS_REGEX`: the expert weights `--cpu-moe` keeps on the CPU."""
FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."
"""`LLM_FFN_DENSE_REGEX`: the dense FFN weights `--n-cpu-ffn` keeps on the CPU."""
CPU_BUFFER = "CPU"
_LAYER = re.compile(r"^blk\.(\d+)\.")

COUNTED = frozenset(
    {
        "--batch-size", "--ubatch-size", "--flash-attn", "--kv-unified", "--swa-full",
        "--override-tensor", "--cpu-moe", "--n-cpu-moe", "--n-cpu-ffn",
    }
)  # fmt: skip
"""Options the plan counts (by `Option.name`)."""
MOVES_TENSORS = frozenset({"--override-tensor", "--cpu-moe", "--n-cpu-moe", "--n-cpu-ffn"})

_KV_ON_HOST = (
    "it keeps the KV cache in host RAM, and the plan puts each layer's cache on that layer's device"
)
_NO_OP_OFFLOAD = "it changes which device runs the CPU layers' large batches (compute buffers)"
UNCOUNTABLE_SPELLINGS: Mapping[str, str] = {
    "-nkvo": _KV_ON_HOST,
    "--no-kv-offload": _KV_ON_HOST,
    "--no-op-offload": _NO_OP_OFFLOAD,
    "--mmproj-auto": PROJECTOR,
}
"""One spelling of an option otherwise neutral: the default (`-kvo`) is, its opposite not."""
NEUTRAL_SPELLINGS_OF = frozenset({"--kv-offload", "--op-offload", "--mmproj-auto"})
"""Options neutral in every spelling but those of UNCOUNTABLE_SPELLINGS."""
NEUTRAL = frozenset(
    {
        # Threads, priorities, polling, NUMA: no memory.
        "--threads-batch", "--cpu-mask", "--cpu-range", "--cpu-strict", "--prio", "--poll",
        "--cpu-mask-batch", "--cpu-range-batch", "--cpu-strict-batch", "--prio-batch",
        "--poll-batch", "--numa", "--threads-http",
        # Generation and sampling of requests.
        "--predict", "--keep", "--samplers", "--seed", "--sampler-seq", "--ignore-eos",
        "--top-nsigma", "--xtc-probability", "--xtc-threshold", "--typical", "--repeat-last-n",
        "--repeat-penalty", "--presence-penalty", "--frequency-penalty", "--dry-multiplier",
        "--dry-base", "--dry-allowed-length", "--dry-penalty-last-n", "--dry-sequence-breaker",
        "--adaptive-target", "--adaptive-decay", "--dynatemp-range", "--dynatemp-exp",
        "--mirostat", "--mirostat-lr", "--mirostat-ent", "--logit-bias", "--grammar",
        "--grammar-file", "--json-schema", "--json-schema-file", "--reverse-prompt",
        "--special", "--spm-infill", "--escape", "--context-shift", "--embd-normalize",
        # RoPE and YaRN: arithmetic on positions, no buffers.
        "--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale",
        "--yarn-orig-ctx", "--yarn-ext-factor", "--yarn-attn-factor", "--yarn-beta-slow",
        "--yarn-beta-fast",
        # Loading: the same bytes resident (the plan budgets every weight as resident).
        "--load-mode", "--lazy-mode", "--check-tensors", "--warmup", "--defrag-thold",
        # --fit changes nothing once -ngl and -c are set, which the program always sets
        # (common/fit.cpp: "n_gpu_layers already set by user ... abort").
        "--fit", "--fit-target", "--fit-ctx",
        # Logs and timings.
        "--perf", "--log-disable", "--log-jsonl", "--log-colors", "--verbose", "--offline",
        "--log-prefix", "--log-timestamps",
        # The HTTP server, its UI and tools, chat templates and reasoning.
        "--tags", "--reuse-port", "--cors-origins", "--cors-methods",
        "--cors-headers", "--cors-credentials", "--ui-config", "--ui-config-file",
        "--agent", "--ui", "--chat-template-kwargs", "--timeout",
        "--sse-ping-interval", "--props", "--slots",
        "--reasoning-format", "--reasoning", "--reasoning-effort", "--reasoning-budget",
        "--reasoning-budget-message", "--reasoning-preserve", "--chat-template",
        "--chat-template-file", "--skip-chat-parsing", "--prefill-assistant",
        "--slot-prompt-similarity", "--sleep-idle-seconds",
        # The prompt cache lives in --cache-ram, which the plan counts.
        "--cache-prompt", "--cache-reuse", "--cache-idle-slots",
        # The router's options: a server given -m is no router.
        "--models-max", "--models-autoload",
        # Tuning of a draft (server.speculative renders its method, sizes and model) or of an
        # adapter that only exists with an option refused above.
        "--lora-init-without-apply", "--spec-draft-type-k", "--spec-draft-type-v",
        "--spec-draft-threads", "--spec-draft-threads-batch", "--spec-draft-cpu-mask",
        "--spec-draft-cpu-range", "--spec-draft-cpu-strict", "--spec-draft-prio",
        "--spec-draft-poll", "--spec-draft-cpu-mask-batch", "--spec-draft-cpu-strict-batch",
        "--spec-draft-prio-batch", "--spec-draft-poll-batch", "--spec-draft-override-tensor",
        "--spec-draft-cpu-moe", "--spec-draft-n-cpu-moe", "--spec-synth-len",
        "--spec-synth-rates", "--spec-draft-p-split", "--spec-draft-backend-sampling",
        "--spec-draft-sampling", "--spec-draft-device", "--spec-ngram-mod-n-min",
        "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-match", "--spec-ngram-simple-size-n",
        "--spec-ngram-simple-size-m", "--spec-ngram-simple-min-hits",
        "--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m", "--spec-ngram-map-k-min-hits",
        "--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m",
        "--spec-ngram-map-k4v-min-hits", "--draft", "--draft-min", "--spec-ngram-size-n",
        "--spec-ngram-size-m", "--spec-ngram-min-hits",
        # A projector's settings, which only exist with --mmproj (refused above).
        "--mmproj-offload", "--mmproj-device", "--image-min-tokens", "--image-max-tokens",
        "--mtmd-batch-max-tokens", "--video-fps", "--video-timestamp-interval",
        "--video-ffmpeg-dir",
    }
)  # fmt: skip
"""Options that change no memory the plan budgets. One the program renders may stay listed
(the component refuses it in extra words before the plan reads them): a flag made of a neutral
option needs nothing of the plan."""


@dataclass(frozen=True)
class TensorOverride:
    """One `pattern=buffer` of llama.cpp's tensor buffer overrides, in argv order."""

    pattern: str
    buffer: str
    source: str
    """The extra argument it comes from (`server.extraArgs[3] --n-cpu-moe`), for messages."""


@dataclass(frozen=True)
class CpuTensors:
    """Tensors an override keeps in host RAM, by where they would be (`"0"`.. a layer,
    `"output"` the output layer's): their bytes, and their matrix weights (which llama.cpp
    may repack, as any CPU-resident weight)."""

    bytes_by_where: Mapping[str, int] = field(default_factory=dict)
    matmul_by_where: Mapping[str, tuple[MatmulWeight, ...]] = field(default_factory=dict)

    def bytes_of(self, wheres: Sequence[str]) -> int:
        """Bytes of these places' overridden tensors."""
        return sum(self.bytes_by_where.get(where, 0) for where in wheres)

    def matmul_of(self, wheres: Sequence[str]) -> list[MatmulWeight]:
        """The overridden matrix weights of these places."""
        return [w for where in wheres for w in self.matmul_by_where.get(where, ())]


@dataclass(frozen=True)
class ExtraArgsEffect:
    """What the extra arguments change in the plan's inputs, and why it cannot count others."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    """LlamaCppPlanInputs fields they set: `ubatch`, `batch`, `flash_attn`, `kv_unified`,
    `swa_full`."""
    overrides: tuple[TensorOverride, ...] = ()
    problems: tuple[str, ...] = ()


def _parsed(words: Sequence[str]) -> list[ExtraArg]:
    table = llama_server_options()
    return parse_extra_args(words, table, owned_spellings(table, OWNED_OPTIONS), REFUSED_OPTIONS)[0]


def rope_options(words: Sequence[str]) -> dict[str, str]:
    """The rope/YaRN options among llama-server extra words, by the option's name (every
    spelling llama-server accepts), with the value as given."""
    names = ("--rope-scaling", "--rope-scale", "--rope-freq-scale", "--yarn-orig-ctx")
    return {
        arg.option.name: arg.values[0]
        for arg in _parsed(words)
        if arg.option.name in names and arg.values
    }


def _whole_number(arg: ExtraArg, key: str, minimum: int) -> tuple[int | None, str | None]:
    value = arg.values[0].strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,9}", value) or int(value) < minimum:
        return None, f"{key} {arg.spelling} {value!r} is not a whole number >= {minimum}"
    return int(value), None


def extra_args_effect(words: Sequence[str], key: str = "server.extraArgs") -> ExtraArgsEffect:
    """The plan's reading of llama-server extra words (already valid llama-server options)."""
    settings: dict[str, Any] = {}
    overrides: list[TensorOverride] = []
    problems: list[str] = []
    for arg in _parsed(words):
        name, where = arg.option.name, f"{key}[{arg.index}]"
        reason = UNCOUNTABLE_SPELLINGS.get(arg.spelling) or UNCOUNTABLE.get(name)
        if reason is not None:
            problems.append(
                f"plan: {where}: {arg.spelling} changes memory the plan cannot count ({reason}): "
                "remove it, or set memory.check: false to deploy without the plan's check"
            )
        elif name in ("--batch-size", "--ubatch-size"):
            number, problem = _whole_number(arg, where, 1)
            if problem:
                problems.append(f"plan: {problem}")
            else:
                settings["batch" if name == "--batch-size" else "ubatch"] = number
        elif name == "--flash-attn":
            settings["flash_attn"] = arg.values[0] != "off"
        elif name == "--kv-unified":
            settings["kv_unified"] = not arg.spelling.startswith(("--no-", "-no-"))
        elif name == "--swa-full":
            settings["swa_full"] = True
        elif name == "--override-tensor":
            for part in arg.values[0].split(","):
                pattern, equals, buffer = part.partition("=")
                if not equals:
                    problems.append(f"plan: {where}: {part!r} is not PATTERN=BUFFER")
                    continue
                overrides.append(TensorOverride(pattern, buffer, f"{where} {arg.spelling}"))
        elif name == "--cpu-moe":
            overrides.append(TensorOverride(FFN_EXPS_REGEX, CPU_BUFFER, f"{where} {arg.spelling}"))
        elif name in ("--n-cpu-moe", "--n-cpu-ffn"):
            count, problem = _whole_number(arg, where, 0)
            if problem:
                problems.append(f"plan: {problem}")
                continue
            regex = FFN_EXPS_REGEX if name == "--n-cpu-moe" else FFN_DENSE_REGEX
            source = f"{where} {arg.spelling}"
            overrides += [
                TensorOverride(rf"blk\.{il}{regex}", CPU_BUFFER, source) for il in range(count or 0)
            ]
    for override in overrides:
        if override.buffer != CPU_BUFFER:
            problems.append(
                f"plan: {override.source}: {override.pattern}={override.buffer}: the plan counts "
                f"tensors moved to {CPU_BUFFER} only (remove it, or set memory.check: false)"
            )
    return ExtraArgsEffect(settings, tuple(overrides), tuple(dict.fromkeys(problems)))


def cpu_tensors(
    overrides: Sequence[TensorOverride], tensors: Mapping[str, str]
) -> tuple[CpuTensors, list[str]]:
    """The tensors (name → `TYPE ne0x..`) the overrides keep in host RAM, as llama.cpp picks
    them (the first override whose pattern a regex search finds in the name), and the
    patterns it cannot read."""
    compiled: list[tuple[re.Pattern[str], TensorOverride]] = []
    problems: list[str] = []
    for override in overrides:
        try:
            compiled.append((re.compile(override.pattern), override))
        except re.error as exc:
            problems.append(f"plan: {override.source}: {override.pattern!r} is no regex ({exc})")
    moved: dict[str, int] = {}
    matmul: dict[str, list[MatmulWeight]] = {}
    for name, key in tensors.items():
        first = next((o for pattern, o in compiled if pattern.search(name)), None)
        if first is None or first.buffer != CPU_BUFFER or name.startswith(INPUT_TENSORS):
            continue  # the input layer is on the CPU anyway
        match = _LAYER.match(name)
        where = match[1] if match else "output"
        moved[where] = moved.get(where, 0) + tensor_key_bytes(key)
        type_name, _, shape = key.partition(" ")
        dims = tuple(int(d) for d in shape.split("x"))
        if len(dims) in (2, 3):
            matmul.setdefault(where, []).append(MatmulWeight(type_name, dims))
    return CpuTensors(moved, {w: tuple(ms) for w, ms in matmul.items()}), problems


def needs_tensors_problem(effect: ExtraArgsEffect, summary: Mapping[str, Any] | None) -> list[str]:
    """Why tensor overrides cannot be counted without a schema 3 summary (empty when they can)."""
    if not effect.overrides or (summary is not None and summary.get("tensors") is not None):
        return []
    sources = ", ".join(dict.fromkeys(o.source for o in effect.overrides))
    have = (
        "the model is not locked yet"
        if summary is None
        else f"the lock's GGUF summary (schema {summary.get('schema')}) has no per-tensor sizes"
    )
    return [
        f"plan: {sources}: keeps tensors in host RAM by name, which the plan counts from the "
        f"lock's per-tensor sizes, and {have}: run llm-infra lock STACK"
    ]


PlanInputs = TypeVar("PlanInputs")


def with_extra_args(
    inputs: PlanInputs, words: Sequence[str], summary: Mapping[str, Any] | None
) -> PlanInputs:
    """LlamaCppPlanInputs with what the extra words change (tensor overrides only with a
    summary that lists every tensor; `extra_args_problems` says why otherwise)."""
    effect = extra_args_effect(words)
    changes: dict[str, Any] = dict(effect.settings)
    tensors = None if summary is None else summary.get("tensors")
    if effect.overrides and tensors is not None:
        changes["cpu_tensors"] = cpu_tensors(effect.overrides, tensors)[0]
    if tensors is not None:
        changes["tensors"] = tensors
    if words:
        changes["extra_args"] = tuple(words)
    return replace(inputs, **changes) if changes else inputs  # type: ignore[type-var]


def n_cpu_moe_tensors(layers: int, tensors: Mapping[str, str]) -> CpuTensors:
    """What `--n-cpu-moe LAYERS` keeps in host RAM: the expert weights of the first layers."""
    source = "--n-cpu-moe"
    overrides = [TensorOverride(rf"blk\.{il}{FFN_EXPS_REGEX}", CPU_BUFFER, source)
                 for il in range(layers)]  # fmt: skip
    return cpu_tensors(overrides, tensors)[0]


def extra_args_problems(
    words: Sequence[str], summary: Mapping[str, Any] | None, key: str = "server.extraArgs"
) -> list[str]:
    """Why the plan cannot count the extra words (empty when it counts them all)."""
    effect = extra_args_effect(words, key)
    problems = [*effect.problems, *needs_tensors_problem(effect, summary)]
    tensors = None if summary is None else summary.get("tensors")
    if effect.overrides and tensors is not None:
        problems += cpu_tensors(effect.overrides, tensors)[1]
    return problems
