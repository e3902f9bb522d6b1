"""The `llm-infra` command line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from components.payloads import fetcher
from infra.config import (
    ConfigError,
    StackConfig,
    StrixHaloStack,
    lock_path_for,
    project_root,
    read_stack_file,
    resolve_stack,
)

EXIT_CONFIG = 2


def _render(args: argparse.Namespace) -> int:
    # Imported here: pulumi and its Kubernetes SDK are slow to import, and `fetch` needs neither.
    from infra import program, render

    name, path = resolve_stack(args.stack)
    if not path.is_file():
        print(
            f"llm-infra: no stack file {path} (stacks are stacks/Pulumi.NAME.yaml)", file=sys.stderr
        )
        return EXIT_CONFIG
    try:
        stack_file = read_stack_file(path)
        rendered = render.run_program(
            program.main, stack_file.config, stack_file.secret_keys, stack=name
        )
    except ConfigError as exc:
        print(f"llm-infra: invalid configuration in {path}:", file=sys.stderr)
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_CONFIG
    out = Path(args.out) if args.out else Path("rendered") / name
    written = render.write(rendered, out)
    print(
        f"rendered stack {name}: {len(rendered.resources)} resources, "
        f"{len(rendered.manifests)} Kubernetes objects → {out}/"
    )
    for path_written in written:
        print(f"  {path_written}")
    return 0


def _load_stack(stack: str) -> tuple[str, Path, StackConfig]:
    """A stack file validated as the program validates it (ConfigError on problems)."""
    stack_file = read_stack_file(stack)
    return stack_file.name, stack_file.path, stack_file.stack()


def _report(exc: ConfigError, what: str) -> int:
    print(f"llm-infra: {what}:", file=sys.stderr)
    for problem in exc.problems:
        print(problem, file=sys.stderr)
    return EXIT_CONFIG


def _lock(args: argparse.Namespace) -> int:
    from infra import lock

    try:
        name, path, stack = _load_stack(args.stack)
        resolved = lock.resolve_lock(stack.model, token=hf_token(name), endpoint=args.endpoint)
    except ConfigError as exc:
        return _report(exc, f"cannot lock {args.stack}")
    target = lock_path_for(path)
    previous = lock.read_lock(target) if target.is_file() else None
    lock.write_lock(target, resolved)
    size = resolved.total_bytes / 2**30
    change = "unchanged" if previous == resolved else ("updated" if previous else "created")
    print(
        f"locked {resolved.repo}@{resolved.revision} ({len(resolved.files)} files, "
        f"{size:.2f} GiB) → {target} ({change})"
    )
    return 0


def _plan(args: argparse.Namespace) -> int:
    from components.gguf_header import read_gguf_header, summarize
    from infra.lock import model_source
    from infra.plan.llamacpp import suggest
    from infra.plan.stack import llamacpp_inputs, stack_plan

    try:
        _, path, stack = _load_stack(args.stack)
        source = model_source(stack.model, lock_path_for(path), preview=True)
    except ConfigError as exc:
        return _report(exc, f"invalid configuration in {args.stack}")
    header = None
    if args.gguf:
        headers = []
        for shard in args.gguf:
            with Path(shard).open("rb") as handle:
                headers.append(read_gguf_header(handle))
        header = summarize(headers)
    plan = stack_plan(stack, source, header)
    best = None
    if args.suggest and isinstance(stack, StrixHaloStack):
        best = suggest(llamacpp_inputs(stack, source, header), headroom_gib=args.headroom)
    if args.json:
        document = plan.to_json()
        if best is not None:
            document["suggest"] = {
                "headroom_gib": args.headroom,
                "gpu_layers": best.gpu_layers,
                "context_size": best.ctx_size,
            }
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print(plan.table())
        if best is not None:
            print(
                f"suggest (keeping {args.headroom:g} GiB VRAM free): server.gpuLayers: "
                f"{best.gpu_layers}, server.contextSize: {best.ctx_size} "
                f"(at server.gpuLayers {stack.server.gpu_layers})"  # type: ignore[union-attr]
            )
    return 0 if plan.fits else 1


def stack_url(stack: StackConfig) -> str:
    """The endpoint a stack serves (in-cluster for kubernetes: reach it by port-forward)."""
    if isinstance(stack, StrixHaloStack):
        from components.llamacpp_manifests import service_url

        port = stack.server.service_port or stack.server.port
        return service_url(stack.server.resource_name, stack.kubernetes.namespace, port)
    return f"https://{stack.caddy.site}"


def _endpoint_tool(args: argparse.Namespace, rest: list[str]) -> int:
    """`verify` and `bench`: the stack's endpoint (or --url) and its expectations file."""
    from components.payloads import verify
    from infra.cli import bench as serve_bench

    try:
        name, path, stack = _load_stack(args.stack)
    except ConfigError as exc:
        return _report(exc, f"invalid configuration in {args.stack}")
    url = args.url or stack_url(stack)
    if args.command == "bench":
        return serve_bench.main([url, *rest])
    expect = path.with_name(f"{name}.verify.json")
    if not expect.is_file() and "--record" not in rest:
        print(
            f"llm-infra verify: no expectations {expect}: record them once against a deployment "
            f"you trust (llm-infra verify {name} --url URL --record) and commit the file",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    floor = stack.server.min_decode_tps
    if floor is not None and "--min-decode-tps" not in rest:
        rest = [*rest, "--min-decode-tps", repr(floor)]
    return verify.main([url, "--expect", str(expect), *rest])


def _decoded(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        return value


def hf_token(stack: str) -> str | None:
    """The HF token from the environment, else from the stack's Pulumi secret config."""
    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    pulumi_cli = shutil.which("pulumi")
    if pulumi_cli is None:
        return None
    result = subprocess.run(
        [pulumi_cli, "config", "get", "hfToken", "--stack", stack],
        capture_output=True, text=True, check=False, cwd=project_root(),
    )  # fmt: skip
    return result.stdout.strip() or None if result.returncode == 0 else None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `llm-infra`."""
    parser = argparse.ArgumentParser(
        prog="llm-infra", description="Deploy large LLM servers on AMD hardware with Pulumi."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    render_cmd = sub.add_parser(
        "render", help="write what a stack would create (no cluster, no Pulumi CLI, no account)"
    )
    render_cmd.add_argument("stack", help="stack name (stacks/Pulumi.NAME.yaml) or stack file")
    render_cmd.add_argument("--out", help="output directory (default: rendered/STACK)")
    render_cmd.set_defaults(func=_render)
    lock_cmd = sub.add_parser(
        "lock", help="resolve the stack's model to a commit, files, sizes and sha256 (lock file)"
    )
    lock_cmd.add_argument("stack", help="stack name (stacks/Pulumi.NAME.yaml) or stack file")
    lock_cmd.add_argument(
        "--endpoint", default=os.environ.get("HF_ENDPOINT"), help="hub endpoint (HF_ENDPOINT)"
    )
    lock_cmd.set_defaults(func=_lock)
    plan_cmd = sub.add_parser("plan", help="the memory and disk budget of a stack, and its verdict")
    plan_cmd.add_argument("stack", help="stack name (stacks/Pulumi.NAME.yaml) or stack file")
    plan_cmd.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan_cmd.add_argument(
        "--suggest", action="store_true", help="the highest -ngl and largest context that fit"
    )
    plan_cmd.add_argument(
        "--headroom", type=float, default=4.0, help="GiB of VRAM --suggest keeps free (4)"
    )
    plan_cmd.add_argument(
        "--gguf", nargs="+", metavar="SHARD", help="plan from these GGUF files' headers"
    )
    plan_cmd.set_defaults(func=_plan)
    for name, help_text in (
        ("verify", "check the deployed endpoint's answers against the stack's expectations"),
        ("bench", "measure decode, prefill, TTFT and concurrent throughput of the endpoint"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("stack", help="stack name (stacks/Pulumi.NAME.yaml) or stack file")
        cmd.add_argument(
            "--url",
            help="endpoint (default: the stack's URL; e.g. http://127.0.0.1:8080 through "
            "kubectl port-forward); other options go to the tool, see --help of each",
        )
        cmd.set_defaults(func=_endpoint_tool)
    for name, help_text in (
        ("gpu-gate", "fail unless llama-server's load log shows the layers on a GPU"),
        ("diff", "the render diff of a stack against a git ref (what the PR preview posts)"),
        ("check-litellm", "check that a litellm.yaml routes each stack's model name"),
        ("docs", "write docs/STACK.md, the deployment reference, from the config and the plan"),
        ("fetch", "download a locked model into a directory (resumable, atomic)"),
        ("check-model", "check that a directory holds the complete locked model"),
    ):
        cmd = sub.add_parser(name, help=help_text, add_help=False)
        cmd.set_defaults(func=None, passthrough=name)
    return parser


def _passthrough(command: str, rest: list[str]) -> int:
    """Commands that parse their own arguments."""
    if command == "gpu-gate":
        from components.payloads import gpu_gate

        return gpu_gate.main(rest)
    if command == "diff":
        from infra.cli import diff

        return diff.main(rest)
    if command == "docs":
        from infra.cli import docs

        return docs.main(rest)
    if command == "check-litellm":
        from infra.cli import litellm

        return litellm.main(rest)
    return fetcher.main(["fetch" if command == "fetch" else "check", *rest])


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `llm-infra` console script."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.func is None:
        return _passthrough(args.passthrough, rest)
    if args.command in ("verify", "bench"):
        return _endpoint_tool(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
