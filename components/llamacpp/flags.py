"""llama-server's flags as inputs (LlamaServerFlags), the options each flag owns, and the rules for
extra args: what a stack may add to the command line and what it may not.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired, TypedDict, get_args

from pydantic import Field

from components import option_categories
from components.extra_args import (
    llama_server_options,
    owned_spellings,
    parse_extra_args,
)
from components.grammars import (
    AbsolutePath,
    IpAddress,
    ModelName,
    Port,
    RpcEndpoint,
)
from components.validation import Default, Problem, documented, ref

CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]


CACHE_TYPES: tuple[str, ...] = get_args(CacheType)
GpuLayers = Annotated[int, Field(ge=0, le=100_000)]
"""`-ngl`: layers offloaded to the GPU."""
ContextSize = Annotated[int, Field(ge=1)]
"""`-c`: KV-cache context of all slots together (tokens)."""
Slots = Annotated[int, Field(ge=1, le=1024)]
"""`-np`: parallel slots."""
Temperature = Annotated[float, Field(ge=0, le=100)]
"""`--temp`: sampling temperature."""
TopP = Annotated[float, Field(gt=0, le=1)]
"""`--top-p`: nucleus-sampling threshold."""
TopK = Annotated[int, Field(ge=0, le=1_000_000)]
"""`--top-k`: the k most likely tokens (0: all)."""
MinP = Annotated[float, Field(ge=0, le=1)]
"""`--min-p`: share of the most likely token's probability below which tokens drop."""
PredictTokens = Annotated[int, Field(ge=-1, le=2**31 - 1)]
"""`--n-predict`: tokens a request generates at most (-1: no limit)."""
Threads = Annotated[int, Field(ge=1, le=4096)]
"""CPU threads of llama-server or rpc-server."""
CacheRamMib = Annotated[int, Field(ge=0)]
"""`--cache-ram`: prompt cache in host RAM (MiB)."""

SpecType = Literal[
    "draft-mtp", "draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
]  # fmt: skip
"""`--spec-type` of b11434 (common/speculative.cpp's name map, `none` left out)."""
SPEC_TYPES: tuple[str, ...] = get_args(SpecType)
DraftTokens = Annotated[int, Field(ge=1, le=64)]
"""Tokens a draft proposes per step (`--spec-draft-n-max`)."""
MinDraftTokens = Annotated[int, Field(ge=0, le=64)]
"""Fewest tokens a draft must propose to be used (`--spec-draft-n-min`)."""
DraftProbability = Annotated[float, Field(ge=0, le=1)]
"""The draft's probability floor (`--spec-draft-p-min`)."""
DRAFT_MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
"""Methods that load a draft model of their own (`--spec-draft-model`); `draft-mtp` drafts with
the target's own NextN layers, the n-gram methods with no model at all."""
DEFAULT_DRAFT_N_MAX = 3
"""b11434's `--spec-draft-n-max` default (common/common.h)."""
ROLLBACK_TYPES = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")
"""Methods for which the target keeps rollback state per drafted token (common.h:
`need_n_rs_seq`): deepseek4's compressor states get `n_max` extra planes."""


def rollback_planes(method: str | None, num_speculative_tokens: int | None) -> int:
    """The target context's `n_rs_seq` llama-server b11434 sets for a speculative method."""
    if method not in ROLLBACK_TYPES:
        return 0
    return DEFAULT_DRAFT_N_MAX if num_speculative_tokens is None else num_speculative_tokens


SPEC_TYPES_OF_ARCHITECTURE: dict[str, tuple[tuple[str, ...], str]] = {
    "deepseek4": (
        ("draft-mtp", "draft-dspark", *(t for t in SPEC_TYPES if t.startswith("ngram-"))),
        "b11434 drafts deepseek4 with its own MTP block (src/models/deepseek4.cpp: graph_mtp) or "
        "a DSpark drafter (a dflash GGUF with DeepSeek-V4's hyper-connections); a draft-simple "
        "model would need DeepSeek-V4's vocabulary in a small model, an EAGLE-3 head its 3 "
        "extract layers of a plain-width target, a DFlash draft a NeoX-RoPE backbone",
    ),
}
"""Per architecture, the methods b11434 loads for it, and why only those (others: any)."""


@documented
class LlamaCppSpeculative(TypedDict):
    """Speculative decoding in llama-server (`--spec-*`): a draft proposes tokens, the target
    checks them in one batch; with greedy sampling the answers do not change."""

    method: SpecType
    """`--spec-type`: `draft-mtp` (the model's own NextN/MTP layers), a draft model's method
    (`draft-simple`, `draft-eagle3`, `draft-dflash`, `draft-dspark`), or an n-gram cache of
    the prompt and answer (`ngram-*`, no model)."""
    num_speculative_tokens: NotRequired[DraftTokens | None]
    """`--spec-draft-n-max`: tokens drafted per step (draft methods; omitted: b11434's 3)."""
    min_speculative_tokens: NotRequired[MinDraftTokens | None]
    """`--spec-draft-n-min`: fewest tokens a draft must propose to be used (draft methods)."""
    min_probability: NotRequired[DraftProbability | None]
    """`--spec-draft-p-min`: the draft stops proposing below this probability (draft methods;
    a DSpark draft without a confidence head needs 0)."""
    draft_model_path: NotRequired[AbsolutePath | None]
    """`--spec-draft-model`: the draft model's file, for the draft-model methods (every layer of
    it on the GPU: `--spec-draft-ngl all`)."""


@documented
class LlamaServerFlags(TypedDict):
    """llama-server flags, one typed field per flag (b11434 names in the docstrings)."""

    model_path: AbsolutePath
    """`-m`: model file, the first shard; llama.cpp loads `-0000N-of-0000M` from the same folder."""
    alias: ModelName
    """`--alias`: name in `GET /v1/models`; must match LiteLLM's `model_name` for this server."""
    host: NotRequired[Annotated[IpAddress, Default("0.0.0.0")]]
    """`--host`: bind address; `0.0.0.0` so the Service reaches the pod."""
    port: NotRequired[Annotated[Port, Default(8080)]]
    """`--port`: listen port (containerPort and the Service's targetPort)."""
    jinja: NotRequired[Annotated[bool, Default(True)]]
    """`--jinja`: use the chat template in the GGUF (reasoning comes back in
    `reasoning_content`)."""
    gpu_layers: GpuLayers
    """`-ngl`: GPU layers. llama.cpp counts the output layer too and offloads it first (the
    model's layers + 1 offloads them all)."""
    ctx_size: ContextSize
    """`-c`: KV-cache context of all slots together (tokens); each slot gets a `-np`th of it."""
    parallel: NotRequired[Annotated[Slots, Default(1)]]
    """`-np`: parallel slots, the requests served at once."""
    cont_batching: NotRequired[Annotated[bool, Default(True)]]
    """`--cont-batching` (or `--no-cont-batching`): continuous batching across slots."""
    cache_type_k: NotRequired[Annotated[CacheType, Default("f16")]]
    """`--cache-type-k`: K cache type, one of CACHE_TYPES (deepseek4 needs K = V)."""
    cache_type_v: NotRequired[Annotated[CacheType, Default("f16")]]
    """`--cache-type-v`: V cache type, one of CACHE_TYPES."""
    temperature: Temperature
    """`--temp`: sampling temperature of the requests that set none (clients may override)."""
    top_p: TopP
    """`--top-p`: nucleus-sampling threshold of the requests that set none."""
    top_k: NotRequired[TopK | None]
    """`--top-k`: sample from the k most likely tokens, for the requests that set none (0: all
    tokens; omitted: llama-server's 40)."""
    min_p: NotRequired[MinP | None]
    """`--min-p`: drop tokens less likely than this share of the most likely one, for the
    requests that set none (0: off; omitted: llama-server's 0.05)."""
    n_predict: NotRequired[PredictTokens | None]
    """`--n-predict`: the most tokens a request that sets no `max_tokens` generates, so a
    request that never stops cannot hold its slot for good (-1: no limit; b11434 generates one
    token for 0 as for 1; omitted: llama-server's -1)."""
    threads: Threads
    """`--threads`: CPU threads (sampling and the CPU-resident layers)."""
    cache_ram_mib: NotRequired[CacheRamMib | None]
    """`--cache-ram`: prompt cache in host RAM (MiB), counted against the container limit (omitted:
    llama-server's 8192).
    """
    log_verbosity: NotRequired[Annotated[int, Field(ge=0, le=4)] | None]
    """`-lv`: log verbosity; 4 writes the `load_tensors` offload lines the GPU gate reads."""
    log_file: NotRequired[AbsolutePath | None]
    """`--log-file`: load log for the GPU gate's startup probe."""
    rpc: NotRequired[list[RpcEndpoint] | None]
    """`--rpc`: the workers' rpc-servers (`host:port`), whose GPUs take a share of the layers;
    llama.cpp puts them before the local GPU."""
    tensor_split: NotRequired[list[Annotated[float, Field(ge=0)]] | None]
    """`--tensor-split`: each device's share of the offloaded layers (the RPC workers, then the
    local GPU), as the memory plan computed it."""
    metrics: NotRequired[Annotated[bool, Default(False)]]
    """`--metrics`: Prometheus metrics (`llamacpp:*`) at /metrics, behind the API key when set
    (scrapers reach them through the metrics proxy's port)."""
    repack: NotRequired[Annotated[bool, Default(True)]]
    """False: `--no-repack`, CPU-resident weights stay in the model buffer (no CPU_REPACK or
    AMX buffers); True: llama-server repacks (its own behaviour, no flag)."""
    speculative: NotRequired[LlamaCppSpeculative | None]
    """`--spec-type` and its `--spec-draft-*` settings: speculative decoding; omitted: none."""


Words = Callable[[str, Any], list[str]]
"""How a flag is written: its option and value → its argv words."""


def valued(text: Callable[[Any], str] = str) -> Words:
    """`OPTION VALUE`, the value as `text` writes it; nothing for an unset or empty value."""

    def words(option: str, value: Any) -> list[str]:
        return [] if value is None or value == "" or value == [] else [option, text(value)]

    return words


plain_value = valued()
"""`OPTION VALUE`, the value as `str` writes it."""


def switch(option: str, value: Any) -> list[str]:
    """The option alone when the value is true."""
    return [option] if value else []


def switch_off(option: str, value: Any) -> list[str]:
    """The option (a `--no-...`) alone when the value is false."""
    return [] if value else [option]


def either(off: str) -> Words:
    """The option when the value is true, `off` (its negation) when it is false."""

    def words(option: str, value: Any) -> list[str]:
        return [option if value else off]

    return words


def number(value: float) -> str:
    """A float as llama-server reads it (`1.0`, `0.95`)."""
    return repr(float(value))


def comma_list(values: list[Any]) -> str:
    """`a,b,c`, numbers in their shortest form."""
    return ",".join(f"{v:g}" if isinstance(v, float | int) else str(v) for v in values)


@dataclass(frozen=True)
class Flag:
    """How a field of LlamaServerFlags is rendered: its option and how its words are written."""

    option: str
    words: Words = plain_value


FLAGS: dict[str, Flag] = {
    "model_path": Flag("-m"),
    "alias": Flag("--alias"),
    "host": Flag("--host"),
    "port": Flag("--port"),
    "jinja": Flag("--jinja", switch),
    "gpu_layers": Flag("-ngl"),
    "ctx_size": Flag("-c"),
    "parallel": Flag("-np"),
    "cont_batching": Flag("--cont-batching", either("--no-cont-batching")),
    "cache_type_k": Flag("--cache-type-k"),
    "cache_type_v": Flag("--cache-type-v"),
    "temperature": Flag("--temp", valued(number)),
    "top_p": Flag("--top-p", valued(number)),
    "top_k": Flag("--top-k"),
    "min_p": Flag("--min-p", valued(number)),
    "n_predict": Flag("--n-predict"),
    "threads": Flag("--threads"),
    "rpc": Flag("--rpc", valued(comma_list)),
    "tensor_split": Flag("--tensor-split", valued(comma_list)),
    "cache_ram_mib": Flag("--cache-ram"),
    "log_verbosity": Flag("-lv"),
    "log_file": Flag("--log-file"),
    "metrics": Flag("--metrics", switch),
    "repack": Flag("--no-repack", switch_off),
}
"""Each field of LlamaServerFlags but `speculative` as `llama_server_args` writes it, in argv
order: a new flag is a field and its entry here."""
FLAG_OPTIONS: dict[str, str] = {field: flag.option for field, flag in FLAGS.items()}
"""The option each field of LlamaServerFlags renders (`llama_server_args` writes exactly these):
every spelling of these options is the program's, never an extra argument."""
SPECULATIVE_OPTIONS = (
    "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
    "--spec-draft-model", "--spec-draft-ngl",
)  # fmt: skip
"""The options `speculative` renders (in this order, those it sets)."""
API_KEY_OPTION = "--api-key-file"
"""The option the API key is rendered as (a file from its Secret)."""
MODEL_PRESETS = (
    "--embd-gemma-default", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default",
    "--fim-qwen-7b-default", "--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default",
    "--gpt-oss-20b-default", "--gpt-oss-120b-default", "--vision-gemma-4b-default",
    "--vision-gemma-12b-default",
)  # fmt: skip
"""llama-server's presets that load (and download) a model of their own."""
OWNED_OPTIONS: dict[str, tuple[str, ...]] = {
    **{option: ("flags", field) for field, option in FLAG_OPTIONS.items()},
    API_KEY_OPTION: ("api_key",),
    "--api-key": ("api_key",),
    # Other sources of the model: the model is the store's (its first shard is -m).
    "-mu": ("flags", "model_path"),
    "-hf": ("flags", "model_path"),
    "-hff": ("flags", "model_path"),
    "-dr": ("flags", "model_path"),
    "--models-dir": ("flags", "model_path"),
    "--models-preset": ("flags", "model_path"),
    # Speculative decoding: its method, its settings and the draft are one input.
    **dict.fromkeys(SPECULATIVE_OPTIONS, ("flags", "speculative")),
    # Presets that name a model of their own (and download it).
    **dict.fromkeys(MODEL_PRESETS, ("flags", "model_path")),
}
"""Every option the program sets (one spelling each) → the input it comes from."""
REFUSED_OPTIONS = option_categories.LLAMA_SERVER_REFUSED
"""Options llama-server knows that a deployment must not pass (`option_categories`)."""


TENSOR_OVERRIDE_OPTIONS = ("--override-tensor", "--spec-draft-override-tensor")
"""Options whose value is `PATTERN=BUFFER[,PATTERN=BUFFER...]` (llama.cpp splits it at commas
and each part at its first `=`; a part without one stops llama-server at start)."""


UNQUANTIZED_CACHE_TYPES = ("f32", "f16", "bf16")


def extra_args_problems(
    words: list[str], cache_type_v: str | None = None, gpu_gate: bool = False
) -> list[Problem]:
    """The problems of llama-server extra words (locations relative to the words; a message
    names another input with `ref`, relative to the server's args)."""
    table = llama_server_options()
    owned = owned_spellings(table, OWNED_OPTIONS)
    parsed, problems = parse_extra_args(words, table, owned, REFUSED_OPTIONS)
    for arg in parsed:
        if arg.option.name in TENSOR_OVERRIDE_OPTIONS:
            problem = tensor_override_problem(arg.values[0])
            if problem:
                problems.append(((arg.index + 1,), problem))
        if gpu_gate and arg.option.name == "--log-disable":
            problems.append(
                (
                    (arg.index,),
                    f"silences the load log that {ref('gpu_gate')} reads: the startup probe "
                    "would never pass (drop one of them)",
                )
            )
        quantized_v = cache_type_v is not None and cache_type_v not in UNQUANTIZED_CACHE_TYPES
        if arg.option.name == "--flash-attn" and arg.values == ("off",) and quantized_v:
            problems.append(
                (
                    (arg.index + 1,),
                    f"'off' with the quantized V cache {cache_type_v!r} of "
                    f"{ref('flags', 'cache_type_v')}: llama-server b11434 refuses to start "
                    "(a quantized V cache needs flash attention)",
                )
            )
    return problems


_NOT_ECMASCRIPT = re.compile(r"\(\?[^:=!]|\\[AZzG]")
"""Regex syntax Python reads and llama.cpp's std::regex (ECMAScript) does not: lookbehind,
named groups, inline flags, `\\A`/`\\Z` anchors."""


def tensor_override_problem(value: str) -> str | None:
    """What keeps llama-server (or the plan) from reading a tensor override value, or None."""
    for part in value.split(","):
        pattern, equals, buffer = part.partition("=")
        if not pattern or not equals or not buffer:
            return (
                f"{part!r} is not PATTERN=BUFFER (e.g. 'blk\\.1[0-9]\\.ffn_.*=CPU'; llama.cpp "
                "splits the value at commas, so a pattern has none)"
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"{pattern!r} is not a regular expression ({exc})"
        if _NOT_ECMASCRIPT.search(pattern):
            return (
                f"{pattern!r} uses syntax llama.cpp's ECMAScript regex does not read "
                "(lookbehind, named groups, inline flags, \\A or \\Z)"
            )
    return None
