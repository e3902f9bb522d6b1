"""Server options refused for what they open, by category: one table per server, read by the
component door (`extra_args.parse_extra_args`, through the stack file, Python and the provider
alike) whatever the plan's `memory.check` says.

Each entry names one spelling of an option of the pinned server's table (a unit test keeps them
there); every spelling of that option is refused with its category's reason. No category has an
opt-in: none of these has a use this project's deployments need, and each reason says what to do
instead.
"""

from __future__ import annotations

from collections.abc import Mapping

REASONS: Mapping[str, str] = {
    "runs-tools": "it lets a request run tools or commands inside the container (shell, file "
    "reads and writes, MCP servers it starts or reaches)",
    "serves-files": "it reads or writes files of the container on a request's behalf",
    "loads-code": "it loads Python code (the model repo's own, or a module or file it names) "
    "into the server process",
    "fetches-models": "it downloads a model at start, past the lock's pinned files, the "
    "fetcher's checks and the memory plan",
    "draft-model": "a draft model is weights the lock does not pin and the plan does not count: "
    "speculative decoding belongs in server.speculative",
}
"""Each category's reason, as the refusal says it."""

LLAMA_SERVER: Mapping[str, str] = {
    "--tools": "runs-tools",
    "--tools-runtime": "runs-tools",
    "--mcp-servers-config": "runs-tools",
    "--mcp-servers-json": "runs-tools",
    "--ui-mcp-proxy": "runs-tools",
    "--path": "serves-files",
    "--slot-save-path": "serves-files",
    "--media-path": "serves-files",
    "--log-prompts-dir": "serves-files",
    "--spec-draft-hf": "fetches-models",
    "--mmproj-url": "fetches-models",
    "--spec-draft-model": "draft-model",
}
"""llama-server b11434's options by category."""

VLLM_SERVE: Mapping[str, str] = {
    "--tool-server": "runs-tools",
    "--allowed-local-media-path": "serves-files",
    "--trust-remote-code": "loads-code",
    "--middleware": "loads-code",
    "--worker-cls": "loads-code",
    "--worker-extension-cls": "loads-code",
    "--tool-parser-plugin": "loads-code",
    "--reasoning-parser-plugin": "loads-code",
    "--logits-processors": "loads-code",
    "--log-config-file": "loads-code",
}
"""vLLM 0.33's `vllm serve` options by category."""


def refusals(categories: Mapping[str, str]) -> dict[str, str]:
    """Spelling → the reason its refusal gives, for `parse_extra_args`'s `refused`."""
    return {spelling: REASONS[category] for spelling, category in categories.items()}
