"""The `llm-infra` command line: one module per command, each registering its own parser.

Only the module of the command typed is imported: `llm-infra --help` and the standard-library
commands (fetch, check-model, gpu-gate, verify, bench) never load pulumi or pydantic before they
need them. Ctrl-C ends any command with exit 130 and a closed pipe (`| head`) with 141, both
without a traceback, as other command-line tools do.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_INTERRUPTED = 130
"""128 + SIGINT: what a shell reports for a command stopped by Ctrl-C."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a writer whose reader went away (`| head`)."""


@dataclass(frozen=True)
class Command:
    """One subcommand: the module that registers it, its help, its examples and exit codes."""

    module: str
    summary: str
    description: str
    examples: tuple[str, ...]
    exits: tuple[tuple[int, str], ...]


_CONFIG = (2, "invalid configuration or usage (one line per problem, naming the key)")
COMMANDS: dict[str, Command] = {
    "render": Command(
        "render",
        "write what a stack would create (no cluster, no Pulumi CLI, no account)",
        "Run the stack's Pulumi program offline under mocks and write every resource it would "
        "create: resources.json, manifests.yaml, outputs.json and files/ (the render contract "
        "in the README).",
        ("llm-infra render strix-halo", "llm-infra render mi300x --out /tmp/mi300x -o json"),
        ((0, "rendered"), _CONFIG),
    ),
    "plan": Command(
        "plan",
        "the memory and disk budget of a stack, and its verdict",
        "Print whether the stack's model, KV cache and buffers fit each device (VRAM, HBM, RAM, "
        "disk), with one bar per device, before anything is downloaded.",
        (
            "llm-infra plan strix-halo",
            "llm-infra plan strix-halo -v",
            "llm-infra plan mi300x -o json",
        ),
        ((0, "the stack fits"), (1, "the stack does not fit"), _CONFIG),
    ),
    "init": Command(
        "init",
        "a new stack and its lock for a model, from its repo and GGUF header",
        "Resolve the model (--endpoint, else HF_ENDPOINT; HF_TOKEN) as `lock` does, read its "
        "GGUF header with Range requests (a safetensors model's config.json for docker-host), "
        "and write stacks/Pulumi.NAME.yaml and its lock: the keys a person decides are filled "
        "with values the memory plan fits, each with a comment on how to choose it; the rest "
        "is left to the defaults. `plan` and `render` then work offline.",
        (
            "llm-infra init qwen3 --box strix-halo --repo Qwen/Qwen3-30B-A3B-GGUF "
            "--file '*Q4_K_M.gguf'",
            "llm-infra init big --repo unsloth/DeepSeek-V4-Flash-0731-GGUF --file 'UD-IQ1_M/*' "
            "--gpu-memory-gib 96 --node-ram-gib 128 --carve-out-gib 96 --threads 16 --parallel 2",
            "llm-infra init v4 --target docker-host --repo deepseek-ai/DeepSeek-V4-Flash-0731 "
            "--file '*.safetensors' --file '*.json'",
        ),
        (
            (0, "the stack file and its lock written"),
            (2, "bad usage, the file exists (--force), or the model does not fit or resolve"),
            (
                3,
                "the hub was not reached or failed on its side (try again, or another endpoint)",
            ),
        ),
    ),
    "lock": Command(
        "lock",
        "pin the stack's model to a commit, file sizes and sha256",
        "Resolve the model repo on the Hugging Face hub (--endpoint, else the stack's "
        "store.hfEndpoint, else HF_ENDPOINT; HF_TOKEN) to a commit, its files, sizes and sha256, "
        "and write the lock file the stack then uses.",
        ("llm-infra lock strix-halo", "HF_TOKEN=... llm-infra lock mi300x -o json"),
        (
            (0, "lock written (or already current)"),
            _CONFIG,
            (
                3,
                "the hub was not reached or failed on its side (try again, or another endpoint)",
            ),
        ),
    ),
    "hub": Command(
        "hub",
        "a stand-in Hugging Face hub on loopback, and header-only GGUF files for it",
        "Try a model with no network: `hub serve DIR` serves DIR/OWNER/NAME/... over the hub "
        "protocol on 127.0.0.1 (what lock, init and fetch speak); `hub sample DIR` writes a "
        "header-only GGUF of Qwen3-30B-A3B's shape there; `hub stub SOURCE... --out DIR` makes "
        "header-only copies of GGUF files at hand or on a hub (the real header, the data region "
        "a hole). Run `llm-infra hub ACTION --help` for each action's options.",
        (
            "llm-infra hub sample demo-hub",
            'eval "$(llm-infra hub serve demo-hub --detach)"',
            "llm-infra hub stub ~/models/Qwen3-8B-Q4_K_M.gguf --out demo-hub/Qwen/Qwen3-8B-GGUF",
        ),
        (
            (0, "served until stopped, or written"),
            (2, "bad usage: no such directory, no repos in it, a port in use, not a GGUF file"),
            (3, "stub of a URL: the hub was not reached or failed on its side"),
        ),
    ),
    "verify": Command(
        "verify",
        "check the deployed endpoint's answers against the stack's expectations",
        "Send the stack's fixed prompts (temperature 0, fixed seed) to the deployed endpoint and "
        "compare the answers and the decode speed with STACK.verify.json.",
        (
            "llm-infra verify strix-halo --url http://127.0.0.1:8080",
            "llm-infra verify mi300x --record",
        ),
        ((0, "every answer passed"), (1, "an answer or the speed failed"), _CONFIG),
    ),
    "bench": Command(
        "bench",
        "measure decode, prefill and concurrent throughput of a deployed endpoint",
        "Measure a running server through its OpenAI-compatible API: single-stream decode, "
        "prefill and aggregate throughput, from the server's own token counts.",
        ("llm-infra bench strix-halo --url http://127.0.0.1:8080 --output-file bench.json",),
        ((0, "measured"), (1, "the endpoint failed"), _CONFIG),
    ),
    "tune": Command(
        "tune",
        "the runtime bake-off: the fastest runtime that passes, pinned in STACK.tune.json",
        "On the server's node (--kubernetes: one Job per candidate runtime, run with the server "
        "stopped; --collect: their logs) or on this machine (--local): start llama-server with "
        "the stack's exact flags once per candidate runtime, gate its load, ask for a first "
        "decode, verify its answers against the stack's expectations and measure decode and "
        "prefill at each depth (>= 3 runs: median and spread). A candidate "
        "replaces the current runtime only when it is faster by more than the spread at every "
        "depth. The record is reviewed like the lock; `server.runtime: tuned` renders its winner.",
        (
            "llm-infra tune strix-halo --kubernetes tune/ --runtime rocm --stop-server",
            "llm-infra tune strix-halo --collect tune/*.log",
            "llm-infra tune strix-halo --local candidates.json --model /models/m.gguf "
            "--depths 0,4096 --dry-run",
        ),
        (
            (0, "a winner (or the current runtime kept); the record written"),
            (1, "every candidate was rejected"),
            _CONFIG,
        ),
    ),
    "gpu-gate": Command(
        "gpu_gate",
        "check a llama-server load log: the model really is on the GPU",
        "Read a llama-server log and fail when layers or buffers landed on the CPU (the silent "
        "fallback a broken Vulkan driver or a missing render group causes).",
        ("llm-infra gpu-gate --log server.log --expect-layers 43",),
        ((0, "the model is on the GPU"), (1, "it is not, or the log is incomplete"), _CONFIG),
    ),
    "diff": Command(
        "diff",
        "what a change to a stack would change, resource by resource",
        "Render the stack here and at another git revision, then print one line per changed "
        "resource (update or replace, pod restart) followed by the file diff. The revision's "
        "render is kept in the user's cache and reused while its git tree is the same.",
        ("llm-infra diff strix-halo", "llm-infra diff mi300x --against origin/main -o json"),
        (
            (0, "no change"),
            (1, "the renders differ"),
            (2, "trouble: git, a failed render, or bad usage (the message says which)"),
        ),
    ),
    "check-litellm": Command(
        "check_litellm",
        "check a LiteLLM config against the stacks' routes",
        "Compare a LiteLLM proxy config's model_list with the route each stack renders: every "
        "stack's alias is there, with its URL and model name.",
        ("llm-infra check-litellm litellm.yaml --stack strix-halo",),
        ((0, "the config routes every stack"), (1, "a route is missing or differs"), _CONFIG),
    ),
    "docs": Command(
        "docs",
        "write a stack's generated documentation",
        "Write the Markdown page of a stack (what it runs, its flags, its memory picture as an "
        "SVG, its alerts), or check that the checked-in page is current.",
        ("llm-infra docs strix-halo", "llm-infra docs strix-halo --check"),
        ((0, "written (or current)"), (1, "--check: the page is out of date"), _CONFIG),
    ),
    "schema": Command(
        "schema",
        "write the JSON Schema of a stack file (for editors)",
        "Print (or write, or check) the JSON Schema of a Pulumi.STACK.yaml, generated from the "
        "stack models: editors use it through the yaml-language-server comment at the top of "
        "each stack file. It accepts what Pulumi writes (secure: values, encryptionsalt).",
        ("llm-infra schema --output-file docs/stack.schema.json", "llm-infra schema --check"),
        ((0, "written (or current)"), (1, "--check: the file is out of date")),
    ),
    "explain": Command(
        "schema",
        "a stack key's type, default, allowed values and docs",
        "Print what a stack file key is: its type, default or that it is required, its allowed "
        "values and bounds, and its documentation, for each kind of stack that has it.",
        ("llm-infra explain server.contextSize", "llm-infra explain host.hostKey"),
        ((0, "explained"), (2, "no stack has this key (the closest are named)")),
    ),
    "fetch": Command(
        "fetch",
        "download a locked model into a directory (resumable)",
        "Download every file of a lock into a directory: resumable (HTTP Range), sha256 checked "
        "as it arrives, atomic (the set takes its final names only when all of it is verified). "
        "Ctrl-C keeps every byte already written; run the same command again to resume.",
        (
            "llm-infra fetch --lock stacks/strix-halo.lock.json --dest /models",
            "HF_ENDPOINT=https://hf-mirror.example llm-infra fetch --lock L --dest D",
        ),
        (
            (0, "the set is complete"),
            (2, "bad usage or lock file"),
            (3, "network failure after the retries"),
            (4, "not authorised (set HF_TOKEN)"),
            (5, "no such repo, revision or file"),
            (6, "sha256 mismatch"),
            (7, "disk full"),
            (8, "the hub's size differs from the lock's"),
            (130, "interrupted (Ctrl-C); run again to resume"),
        ),
    ),
    "check-model": Command(
        "fetch",
        "check that a directory holds the complete locked model",
        "The server's init check: the lock's completion marker is there and every file has the "
        "size it had when verified. Reads no file content, so it is fast.",
        ("llm-infra check-model --lock stacks/strix-halo.lock.json --dest /models -o json",),
        ((0, "the set is complete"), (1, "it is not (the problems are listed)"), (2, "bad lock")),
    ),
}
"""Every subcommand, in the order `llm-infra --help` lists them."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; each option's default after its help (not a
    switch's: `--no-X` is off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            action.option_strings
            and "%(default)" not in text
            and "default" not in text
            and action.default is not None
            and action.default is not False
            and action.default != []
            and action.default is not argparse.SUPPRESS
            and not isinstance(
                action, argparse._VersionAction | VersionAction | argparse._StoreFalseAction
            )
        ):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that help written to a closed pipe is a broken pipe (141),
    not silently nothing and exit 0 (argparse swallows the write's OSError)."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def package_version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-infra")
    except PackageNotFoundError:
        return "unknown (not installed)"


class VersionAction(argparse.Action):
    """`--version`: print `llm-infra VERSION` and exit 0 (the version is read only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"llm-infra {package_version()}")
        parser.exit()


def epilog(command: Command) -> str:
    """The examples and exit codes shown under a command's options."""
    lines = ["examples:", *(f"  {example}" for example in command.examples), "", "exit status:"]
    lines += [f"  {code:<3}  {meaning}" for code, meaning in command.exits]
    lines += [f"  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"] if command.module != "fetch" else []
    lines += [f"  {EXIT_BROKEN_PIPE}  the reader of the output went away (| head)"]
    return "\n".join(lines)


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv (the first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(
    full: Collection[str] = COMMANDS.keys(),
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser of `llm-infra` and its subcommands' parsers by name.

    Only the modules of the commands in `full` are imported and register their options; the
    others stay one-line entries in the command list.
    """
    from infra.cli.common import Subparsers

    modules = {COMMANDS[name].module for name in full}
    parser = Parser(
        prog="llm-infra",
        description="Deploy large LLM servers on AMD hardware with Pulumi, from typed stack files.",
        epilog="Run `llm-infra COMMAND --help` for a command's options, examples and exit codes.",
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    registered: set[str] = set()
    for name, command in COMMANDS.items():
        if name in sub.choices:
            continue
        if command.module in modules:
            module = importlib.import_module(f"infra.cli.{command.module}")
            register = getattr(module, "add_parsers", None) or module.add_parser
            register(Subparsers(sub, {n: c.summary for n, c in COMMANDS.items()}))
            registered |= {n for n, c in COMMANDS.items() if c.module == command.module}
        else:
            sub.add_parser(name, help=command.summary)
    for name in registered:
        dress(sub.choices[name], COMMANDS[name])
    return parser, dict(sub.choices)


def dress(parser: argparse.ArgumentParser, command: Command) -> None:
    """Give a command's parser its description, defaults, examples, exit codes and --version."""
    parser.description = textwrap.fill(command.description, width=79)
    parser.epilog = epilog(command)
    parser.formatter_class = HelpFormatter
    parser.allow_abbrev = False
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse argv, importing only the module of the command it names."""
    name = chosen_command(argv)
    if name is not None and name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        parser, _ = build_parser(full=())
        parser.error(f"unknown command {name!r}{hint}; the commands are {', '.join(COMMANDS)}")
    parser, commands = build_parser(full=() if name is None else (name,))
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # The subcommand's own usage, so the user sees the options of what they typed.
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `llm-infra` console script."""
    try:
        try:
            args = parse(sys.argv[1:] if argv is None else argv)
            status: int = args.run(args)
        except SystemExit:
            # --help and usage errors exit through argparse: their output must reach the pipe too.
            sys.stdout.flush()
            raise
        sys.stdout.flush()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return status
