"""`llm-infra init NAME --repo R --file PATTERN`: a new stack and its lock for a model at hand."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from components.payloads.fetcher import DEFAULT_ENDPOINT
from infra.boxes import BOXES
from infra.cli.common import Subparsers, report_config_error, shown_path

if TYPE_CHECKING:
    from infra.lock import ModelLock
    from infra.new_stack import StackRequest
    from infra.new_stack_docker_host import CheckpointConfig

EXIT_NETWORK = 3
"""The hub was not reached or failed on its side."""
STACK_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
"""A stack name: `stacks/Pulumi.NAME.yaml`, `pulumi stack select NAME`."""
OPTIONS = {
    "model.repo": "--repo",
    "model.revision": "--revision",
    "model.files": "--file",
    "model": "--repo",
}
"""The option each of the lock's `model.*` problems comes from."""
ENDPOINTS = (
    "the hub is --endpoint, else $HF_ENDPOINT, else huggingface.co; a token comes from $HF_TOKEN"
)


class TargetChoices:
    """`--target`'s choices: the targets `init` drafts a stack for, read from the table of
    targets when argparse needs them (an option given, the help), so that building the parser
    imports no stack model."""

    def _kinds(self) -> list[str]:
        from infra.targets.registry import init_kinds

        return init_kinds()

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds())

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds()


def add_parser(sub: Subparsers) -> None:
    """Register `init`."""
    parser = sub.add_parser("init")
    parser.add_argument("name", metavar="NAME", help="the stack's name: stacks/Pulumi.NAME.yaml")
    parser.add_argument("--repo", required=True, help="the model's repo, OWNER/NAME")
    parser.add_argument(
        "--file",
        dest="files",
        action="append",
        required=True,
        metavar="PATTERN",
        help="a file or glob in the repo (repeat for more): one GGUF file or shard set for "
        "kubernetes; for docker-host the checkpoint, config.json included (e.g. "
        "'*.safetensors' and '*.json')",
    )
    parser.add_argument(
        "--target",
        choices=TargetChoices(),
        default="kubernetes",
        help="llama.cpp in Kubernetes (GGUF) or vLLM on an SSH host (safetensors)",
    )
    parser.add_argument("--revision", default="main", help="branch, tag or commit to lock")
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        default=None,
        help=f"the hub (default: $HF_ENDPOINT, else {DEFAULT_ENDPOINT}; it is not written "
        "into the stack: set store.hfEndpoint for a mirror the cluster uses too)",
    )
    parser.add_argument(
        "--allow-token-over-http",
        action="store_true",
        help="send $HF_TOKEN to a plain-http --endpoint (refused unless stated)",
    )
    parser.add_argument("--alias", help="the served model name (default: from the repo's name)")
    parser.add_argument(
        "--gpu-memory-gib",
        type=float,
        metavar="GIB",
        help="GPU memory to fit the model in (kubernetes: required unless --box names the box; "
        "docker-host: default one MI300X's HBM)",
    )
    parser.add_argument(
        "--box",
        choices=sorted(BOXES),
        help="a box whose figures stand for the node options not given: strix-halo is the "
        "reference NUCBox (90 GiB GPU, 128 GiB RAM with a 90 GiB carve-out, zen5, 16 threads); "
        "default none: the node options are required",
    )
    parser.add_argument(
        "--node-ram-gib",
        type=float,
        metavar="GIB",
        help="kubernetes: the RAM installed in the server's node, the GPU's carve-out included "
        "(memory.node.ramGib; no default: required unless --box)",
    )
    parser.add_argument(
        "--carve-out-gib",
        type=float,
        metavar="GIB",
        help="kubernetes, unified memory: the VRAM the firmware takes out of the node's RAM "
        "(memory.node.carveOutGib; default 0, a discrete GPU, or the --box's)",
    )
    parser.add_argument(
        "--node-cpu",
        metavar="CPU",
        help="kubernetes: the node's CPU (memory.nodeCpu: zen5, sapphirerapids, ... or a ggml "
        "variant; default unknown, or the --box's)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="kubernetes: the node's physical CPU cores (server.threads; no default: required "
        "unless --box)",
    )
    parser.add_argument(
        "--context-size",
        type=int,
        metavar="TOKENS",
        help="context of all slots together (default: the most that fits, at most the model's "
        "trained context per slot)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        metavar="SLOTS",
        help="requests served at once (default: server.parallel's for kubernetes, vLLM's own for "
        "docker-host)",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite the stack file and lock if they exist"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Resolve the model, draft the stack from its header, write the stack file and lock."""
    from pydantic import ValidationError

    from infra import lock, new_stack_text
    from infra.config import ConfigError, RepoModelSettings
    from infra.config.base import validation_problems
    from infra.config.stack import checkout_root, lock_path_for, stack_file_in
    from infra.targets.registry import drafts

    what = f"cannot init {args.name}"
    problems = usage_problems(args)
    if problems:
        return report_config_error(ConfigError(problems), what)
    root = checkout_root() or Path.cwd()
    stack_path = stack_file_in(root, args.name)
    lock_path = lock_path_for(stack_path)
    existing = [path for path in (stack_path, lock_path) if path.exists()]
    if existing and not args.force:
        verb = "exists" if len(existing) == 1 else "exist"
        named = " and ".join(shown_path(path) for path in existing)
        return report_config_error(ConfigError([f"{named}: {verb} (--force overwrites)"]), what)
    try:
        model = RepoModelSettings.model_validate(
            {"repo": args.repo, "revision": args.revision, "files": args.files}
        )
    except ValidationError as exc:
        lines = [f"model.{p}" for p in validation_problems(exc, RepoModelSettings)]
        return report_config_error(ConfigError(option_lines(lines, args.files)), what)
    endpoint = args.endpoint or os.environ.get("HF_ENDPOINT") or None
    token = os.environ.get("HF_TOKEN") or None
    request = stack_request(args)
    target = drafts(args.target)
    try:
        target.check_request(request)
    except ConfigError as exc:
        return report_config_error(exc, what)
    try:
        resolved = lock.resolve_lock(
            model, token=token, endpoint=endpoint, allow_token_over_http=args.allow_token_over_http
        )
        locked, draft = target.draft(
            request, resolved, lambda: read_config_json(resolved, endpoint, token)
        )
        new_stack_text.check_lock_matches(locked, draft.values)
        text = new_stack_text.stack_file_text(draft)
    except lock.HubUnreachable as exc:
        lines = [line.replace(lock.ENDPOINT_OPTIONS, ENDPOINTS) for line in exc.problems]
        report_config_error(ConfigError(option_lines(lines, args.files)), what)
        return EXIT_NETWORK
    except ConfigError as exc:
        return report_config_error(ConfigError(option_lines(exc.problems, args.files)), what)
    stack_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = stack_path.with_name(f".{stack_path.name}.tmp")
    temporary.write_text(text)
    lock.write_lock(lock_path, locked)
    temporary.replace(stack_path)
    print(
        f"wrote {shown_path(stack_path)} and {shown_path(lock_path)}: {locked.repo}@"
        f"{locked.revision[:12]}, {len(locked.files)} file(s), {locked.total_bytes / 2**30:.2f} "
        f"GiB; {draft.summary}"
    )
    print(f"next: check the commented keys, then llm-infra plan {args.name}", file=sys.stderr)
    return 0


def option_lines(problems: list[str], files: list[str]) -> list[str]:
    """The lock's `model.*` problems as the options they come from (`model.files[1]` is the
    second --file, shown with its pattern)."""
    from infra.new_stack import option_problems

    def pattern(match: re.Match[str]) -> str:
        index = int(match[1])
        return f"--file {files[index]!r}" if index < len(files) else "--file"

    named = [re.sub(r"^model\.files\[(\d+)\]", pattern, line) for line in problems]
    return option_problems(named, OPTIONS)


def usage_problems(args: argparse.Namespace) -> list[str]:
    """The options' own rules, before anything is fetched."""
    problems = []
    if not STACK_NAME.match(args.name):
        problems.append(
            f"NAME: {args.name!r} is not a stack name (lowercase letters, digits, . _ -, "
            "starting with a letter or digit, at most 63)"
        )
    if args.gpu_memory_gib is not None and not 0 < args.gpu_memory_gib <= 100_000:
        problems.append(f"--gpu-memory-gib: {args.gpu_memory_gib:g} is not a size in GiB (> 0)")
    for option, value in (("--node-ram-gib", args.node_ram_gib),
                          ("--carve-out-gib", args.carve_out_gib)):  # fmt: skip
        if value is not None and not 0 <= value <= 100_000:
            problems.append(f"{option}: {value:g} is not a size in GiB")
    if args.threads is not None and not 1 <= args.threads <= 4096:
        problems.append(f"--threads: {args.threads} is not a core count (1-4096)")
    if args.node_cpu is not None:
        from infra.cpus import CPU_NAMES, CPU_VARIANTS

        if args.node_cpu not in CPU_NAMES and args.node_cpu not in CPU_VARIANTS:
            known = ", ".join(sorted({*CPU_NAMES, *CPU_VARIANTS}))
            problems.append(f"--node-cpu: {args.node_cpu!r} is not a CPU the plan knows ({known})")
    from infra.targets.registry import drafts

    problems += drafts(args.target).option_problems(stack_request(args))
    if args.context_size is not None and not 256 <= args.context_size <= 1 << 26:
        problems.append(f"--context-size: {args.context_size} is not a context (256 or more)")
    if args.parallel is not None and not 1 <= args.parallel <= 1024:
        problems.append(f"--parallel: {args.parallel} is not a slot count (1-1024)")
    if args.alias is not None:
        from infra.config.kubernetes import SERVER_NAME_MAX

        if not re.fullmatch(rf"[a-z]([-a-z0-9]{{0,{SERVER_NAME_MAX - 2}}}[a-z0-9])?", args.alias):
            problems.append(
                f"--alias: {args.alias!r} is not a served name this stack can also give its "
                f"Deployment (lowercase letters, digits and -, starting with a letter, at most "
                f"{SERVER_NAME_MAX})"
            )
    return problems


def stack_request(args: argparse.Namespace) -> StackRequest:
    """What the options ask `init` for."""
    from infra.new_stack import StackRequest

    return StackRequest(
        name=args.name,
        target=args.target,
        alias=args.alias,
        gpu_memory_gib=args.gpu_memory_gib,
        context_size=args.context_size,
        parallel=args.parallel,
        box=args.box,
        node_ram_gib=args.node_ram_gib,
        carve_out_gib=args.carve_out_gib,
        node_cpu=args.node_cpu,
        threads=args.threads,
    )


def read_config_json(
    locked: ModelLock, endpoint: str | None, token: str | None
) -> CheckpointConfig:
    """A safetensors model's `config.json` at the locked commit, checked against the lock's
    sha256 (`new_stack_docker_host.checkpoint_config` reads it)."""
    import hashlib
    import urllib.parse

    from components.payloads import http_policy
    from infra import new_stack_docker_host
    from infra.config import ConfigError
    from infra.lock import HubUnreachable

    entry = next((f for f in locked.files if f["path"] == "config.json"), None)
    if entry is None:
        raise ConfigError(
            [
                "--file: the patterns select no config.json at the repo's top, which vLLM reads "
                "(add --file '*.json')"
            ]
        )
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    url = f"{base}/{locked.repo}/resolve/{locked.revision}/{urllib.parse.quote('config.json')}"
    try:
        with http_policy.request(
            url, token=token, max_body=new_stack_docker_host.MAX_CONFIG_BYTES
        ) as response:
            data = response.read_all()
    except http_policy.HttpError as exc:
        problem = f"--file: cannot read config.json: {exc}"
        if exc.status is None or exc.retryable:
            raise HubUnreachable(problem) from None
        raise ConfigError([problem]) from None
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise ConfigError(["--file: config.json changed on the hub while it was locked: try again"])
    return new_stack_docker_host.checkpoint_config(data)
