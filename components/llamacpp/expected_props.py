"""What llama-server b11434 must report at `GET /props` when it runs the rendered argv.

A pure builder over the same validated LlamaCppVulkanServerArgs that make the argv
(`manifests.server_argv`): the build the image names, the `-m` path, the slots (`-np`), each
slot's context (from `-c`, `-np` and any `--kv-unified*` extra argument) and a chat template.
verify compares the server's answer with it (components/payloads/props.py).

What b11434's `/props` reports (llama.cpp b11434 tools/server/server-context.cpp:4955-4999,
`get_res_props`): `build_info` is `llama_build_info()`, "b<build number>-<commit>"
(common/build-info.cpp.in:27-29); `model_path` is `params_base.model.path`, the `-m` value as
given (server-context.cpp:4544); `total_slots` is `params.n_parallel` (server-context.cpp:4970);
`default_generation_settings.n_ctx` is `n_ctx_slot()` (server-context.cpp:4551, 4962), which is
`llama_n_ctx_seq` capped by `--kv-unified-per-slot` and by the model's training context
(server-context.cpp:4376-4385); `chat_template` is the default template's source
(server-context.cpp:4964, 4985). `/props` is not a public path: with an API key it needs the
key like the API (only /health, /v1/health and the web UI's files are public,
tools/server/server-http.cpp:251-258).
"""

import re
from collections.abc import Callable
from typing import Any

from components.extra_args import llama_server_options, owned_spellings, parse_extra_args
from components.images import parse_image
from components.llamacpp.inputs import OWNED_OPTIONS, REFUSED_OPTIONS, LlamaCppVulkanServerArgs
from components.payloads.props import check, new_props

PROPS_ENDPOINT = "/props"
KV_PAD = 256
"""llama_context pads the context, and each slot's share, to 256 cells (GGML_PAD)."""
_BUILD_TAG = re.compile(r"(?:^|[-_.])(b\d{3,})(?:[-_.+]|$)")
"""A llama.cpp build in an image tag (`server-vulkan-b11434`), as images.py pins it."""


def pad(value: int, multiple: int = KV_PAD) -> int:
    """`value` rounded up to a multiple (GGML_PAD)."""
    return -(-value // multiple) * multiple


def slot_cells(ctx_size: int, parallel: int, kv_unified: bool) -> int:
    """The cells of one slot (`n_ctx_seq`) llama_context derives from `-c`, `-np` and
    `--kv-unified` (llama.cpp b11434 src/llama-context.cpp:292-308): the padded context, or
    its padded share per slot."""
    n_ctx = pad(ctx_size)
    return n_ctx if kv_unified else pad(n_ctx // parallel)


def image_build(image: str) -> str | None:
    """The llama.cpp build an image's tag names (`b11434`), or None (a digest, a version)."""
    try:
        tag = parse_image(image).tag
    except ValueError:
        return None
    found = _BUILD_TAG.search(tag or "")
    return found.group(1) if found else None


def _kv_settings(words: list[str]) -> tuple[bool, int]:
    """(`--kv-unified` on, `--kv-unified-per-slot` cap or 0) among the extra arguments, by
    every spelling llama-server accepts; the last one given wins, as in llama-server."""
    table = llama_server_options()
    owned = owned_spellings(table, OWNED_OPTIONS)
    unified, cap = False, 0
    for arg in parse_extra_args(words, table, owned, REFUSED_OPTIONS)[0]:
        if arg.option.name == "--kv-unified":
            unified = not arg.spelling.startswith(("--no-", "-no-"))
        elif arg.option.name == "--kv-unified-per-slot" and arg.values:
            cap = int(arg.values[0]) if arg.values[0].strip().isdigit() else 0
    return unified, cap


def expected_props(
    args: LlamaCppVulkanServerArgs, name: Callable[[str], str] = str
) -> dict[str, Any]:
    """The `/props` a server of these (validated) args reports, as an llm-infra-props/1
    document; `name` spells an input path (`flags.parallel`) as the caller wrote it."""
    flags = args["flags"]
    words = list(args.get("extra_args") or [])
    unified, cap = _kv_settings(words)
    cells = slot_cells(flags["ctx_size"], flags["parallel"], unified)
    context_from = f"{name('flags.ctx_size')} / {name('flags.parallel')}"
    if unified:
        context_from = f"{name('flags.ctx_size')} ({name('extra_args')} --kv-unified)"
    if cap and cap < cells:
        cells = cap
        context_from = f"{name('extra_args')} --kv-unified-per-slot"
    template_from = name("flags.model_path")
    if any(w.split("=", 1)[0] in ("--chat-template", "--chat-template-file") for w in words):
        template_from = name("extra_args")
    checks = [
        check(["model_path"], flags["model_path"], name("flags.model_path")),
        check(["total_slots"], flags["parallel"], name("flags.parallel")),
        # Capped at the model's training context too, which the args do not know: the stack's
        # memory plan refuses a slot beyond it (infra/plan/stack.py context_problems).
        check(["default_generation_settings", "n_ctx"], cells, context_from),
        check(["chat_template"], "a chat template", template_from, match="non-empty"),
    ]
    notes = []
    build = image_build(args["image"])
    if build is not None:
        checks.insert(0, check(["build_info"], build, name("image"), match="build"))
    else:
        notes.append(
            f"build_info: not checked ({name('image')} {args['image']!r} names no llama.cpp "
            "build tag such as server-vulkan-b11434)"
        )
    return new_props(PROPS_ENDPOINT, "llama-server", checks, notes)
