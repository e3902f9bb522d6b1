"""`llm-infra hub serve|sample|stub`: a stand-in Hugging Face hub on loopback, and header-only
GGUF files to put in it, for trying a model offline (`infra.hub`)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import textwrap
import urllib.parse
from pathlib import Path

from infra.cli.common import EXIT_CONFIG, Subparsers, shown_path

EXIT_NETWORK = 3
"""`stub` of a URL: the hub was not reached or failed on its side."""


def add_parser(sub: Subparsers) -> None:
    """Register `hub` and its subcommands."""
    from infra.cli import HelpFormatter

    parser = sub.add_parser("hub")
    actions = parser.add_subparsers(dest="hub_command", required=True, metavar="ACTION")

    def action(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        """The parser of `hub NAME`: its line in the list, its description wrapped."""
        return actions.add_parser(
            name,
            help=summary,
            description=textwrap.fill(description, width=79),
            formatter_class=HelpFormatter,
        )

    serve = action(
        "serve",
        "serve DIR/OWNER/NAME/... over the hub protocol on 127.0.0.1",
        "Serve the repos under DIR (DIR/OWNER/NAME/path/to/file) over the hub "
        "protocol on 127.0.0.1 only, as huggingface_hub, `llm-infra lock`, `init` and `fetch` "
        "speak it. The first line on stdout is HF_ENDPOINT=URL; Ctrl-C stops it. Each file is "
        "hashed once (kept in DIR/.llm-infra-hub.json); restart after changing DIR.",
    )
    serve.add_argument("dir", type=Path, metavar="DIR", help="the directory of repos")
    serve.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one, printed)"
    )
    serve.add_argument(
        "--detach",
        action="store_true",
        help="serve in the background: print shell lines that set HF_ENDPOINT and "
        'LLM_INFRA_HUB_PID (use: eval "$(llm-infra hub serve DIR --detach)"; stop it with: '
        'kill "$LLM_INFRA_HUB_PID")',
    )
    serve.add_argument("--detached-child", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(run=run_serve)
    sample = action(
        "sample",
        "write a header-only GGUF of Qwen3-30B-A3B's shape into DIR",
        "Write DIR/Qwen/Qwen3-30B-A3B-GGUF/Qwen3-30B-A3B-Q4_K_M.gguf: the header of a "
        "qwen3moe model of Qwen3-30B-A3B's shape at Q4_K_M (48 layers, 128 experts, "
        "~17 GiB), at its full size, its data region a hole (a few MiB on disk).",
    )
    sample.add_argument("dir", type=Path, metavar="DIR", help="the directory of repos")
    sample.set_defaults(run=run_sample)
    stub = action(
        "stub",
        "header-only copies of GGUF files at hand or on a hub",
        "Copy the header of each GGUF file (a path, or an http(s) URL read with "
        "Range requests, HF_TOKEN sent over https only) byte for byte into OUT/NAME, at the "
        "file's size with the data region a hole: a big model to serve with `hub serve` and "
        "lock, plan and render offline.",
    )
    stub.add_argument("sources", nargs="+", metavar="SOURCE", help="GGUF file paths or URLs")
    stub.add_argument(
        "--out", type=Path, required=True, help="the folder to write into (DIR/OWNER/NAME/...)"
    )
    stub.set_defaults(run=run_stub)


def _problem(message: str, status: int = EXIT_CONFIG) -> int:
    print(f"llm-infra hub: {message}", file=sys.stderr)
    return status


def run_serve(args: argparse.Namespace) -> int:
    """Serve DIR until stopped (or start a server in the background with --detach)."""
    from infra.hub.repos import DirectoryRepos
    from infra.hub.server import HubServer

    root: Path = args.dir
    if not root.is_dir():
        return _problem(f"{root}: not a directory (serve DIR holding DIR/OWNER/NAME/files)")
    if not 0 <= args.port <= 65535:
        return _problem(f"--port: {args.port} is not a port (0-65535; 0: a free one)")
    if args.detach:
        return _detach(root, args.port)

    def progress(message: str) -> None:
        print(f"hub: {message}", file=sys.stderr, flush=True)

    source = DirectoryRepos(root, progress)
    for skipped in source.skipped:
        progress(f"not served: {skipped}")
    if not source.repos:
        return _problem(f"{root}: no repos (serve DIR holding DIR/OWNER/NAME/files)")
    try:
        server = HubServer(source, port=args.port)
    except OSError as exc:
        return _problem(f"--port: cannot listen on 127.0.0.1:{args.port} ({exc.strerror})")
    with server:
        print(f"HF_ENDPOINT={server.url}", flush=True)
        files = sum(len(repo.files) for repo in source.repos.values())
        progress(
            f"serving {len(source.repos)} repo(s), {files} file(s) from {shown_path(root)} at "
            f"{server.url} ({', '.join(sorted(source.repos))})"
        )
        if args.detached_child:
            # The parent has read the address and gone: nothing more reaches its terminal.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.dup2(devnull, sys.stderr.fileno())
        else:
            progress("Ctrl-C stops it")
        server.serve_forever()
    return 0


def _detach(root: Path, port: int) -> int:
    """Start `hub serve` in a session of its own, wait until it listens, and print the shell
    lines that point the other commands at it."""
    child = subprocess.Popen(
        [sys.executable, "-m", "infra.cli", "hub", "serve", str(root.resolve()),
         "--port", str(port), "--detached-child"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    child.stdout.close()
    if not line.startswith("HF_ENDPOINT="):
        return child.wait()
    url = line.removeprefix("HF_ENDPOINT=")
    print(f"HF_ENDPOINT={shlex.quote(url)}; export HF_ENDPOINT;")
    print(f"LLM_INFRA_HUB_PID={child.pid}; export LLM_INFRA_HUB_PID;")
    print(
        f"hub: pid {child.pid} serves {shown_path(root)} at {url}; stop it with: kill {child.pid}",
        file=sys.stderr,
    )
    return 0


def run_sample(args: argparse.Namespace) -> int:
    """Write the sample model's header-only file into DIR."""
    from infra.hub.gguf_stub import write_sample

    try:
        path = write_sample(args.dir)
    except OSError as exc:
        return _problem(f"{args.dir}: cannot write the sample ({exc.strerror or exc})")
    print(_written(path))
    return 0


def _written(path: Path) -> str:
    stat = path.stat()
    return (
        f"wrote {shown_path(path)}: {stat.st_size / 2**30:.2f} GiB, "
        f"{stat.st_blocks * 512 / 2**20:.1f} MiB of it on disk (the header)"
    )


def run_stub(args: argparse.Namespace) -> int:
    """Write a header-only copy of each source into --out."""
    from components.gguf_header import GgufError
    from components.payloads import http_policy
    from infra.hub.gguf_stub import copy_header
    from infra.lock import RangeReader

    for source in args.sources:
        remote = urllib.parse.urlsplit(source).scheme in ("http", "https")
        name = urllib.parse.unquote(urllib.parse.urlsplit(source).path.rsplit("/", 1)[-1])
        if not remote:
            name = Path(source).name
        if (
            not name.endswith(".gguf")
            or name.startswith(".")
            or any(c in name for c in "/\\\0")
            or any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name)
        ):
            return _problem(
                f"{source}: not a .gguf file name ({name!r}: a name of its own, no folder, "
                "no leading dot)"
            )
        target = args.out / name
        if target.parent.resolve() != args.out.resolve():
            return _problem(f"{source}: {name!r} would land outside --out {args.out}")
        try:
            if remote:
                token = os.environ.get("HF_TOKEN") if source.startswith("https://") else None
                path, _ = copy_header(RangeReader(source, token), target)
            else:
                if Path(source).resolve() == target.resolve():
                    return _problem(f"{source}: --out would overwrite the file itself")
                with Path(source).open("rb") as handle:
                    size = os.fstat(handle.fileno()).st_size
                    path, _ = copy_header(handle, target, size)
        except http_policy.HttpError as exc:
            network = exc.status is None or exc.retryable
            return _problem(f"{http_policy.shorten(source)}: {exc}", EXIT_NETWORK if network else 2)
        except (GgufError, EOFError, ValueError) as exc:
            return _problem(f"{source}: not a GGUF file this reader understands ({exc})")
        except OSError as exc:
            return _problem(f"{source}: {exc.strerror or exc}")
        print(_written(path))
    return 0
