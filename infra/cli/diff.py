"""`llm-infra diff STACK [--against REF]`: what a change does to a stack's render.

Renders STACK twice, from a `git worktree` of REF (with REF's own code and stack files) and from
the working tree, and prints one line per changed resource (create, update, replace, delete, and
what that restarts: `infra.render_diff`), then `diff -u -r -N` of the two render directories
(without the render's marker file): the same text the preview workflow posts on a pull request
(it runs `llm-infra diff --renders A B`). Exit status as diff's: 0 identical, 1 different,
2 trouble (git, a failed render of the working tree).

REF's render is kept in the user's cache (`infra.render_cache`) keyed by REF's tree and
everything else a render reads, so diffing again against the same commit renders only the
working tree; `--no-cache` renders REF again.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.cli.common import Subparsers, print_json
from infra.config import names_a_file, resolve_stack, stack_file_in
from infra.config.stack import PROJECT_ENV
from infra.render_cache import cached_render, keep_render, render_key
from infra.render_diff import Change, render_changes, summary

# The file each render keeps for itself (what it wrote); no resource, so no diff shows it.
RENDER_MARKER = ".llm-infra-render.json"
_COLOURS = {"+": "32", "-": "31", "@": "36"}
_ACTION_COLOURS = {"create": "32", "update": "33", "replace": "31", "delete": "31"}

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_TROUBLE = 2
DEFAULT_REMOTE_REF = "origin/main"


class DiffError(Exception):
    """A failure that stops the diff (exit 2), with what to do about it."""


def git(repo: Path, *args: str) -> str:
    """Run git in repo; its stdout, or DiffError with its stderr."""
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise DiffError(f"git {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result.stdout


def repo_root(start: Path) -> Path:
    """The top of the git working tree that holds start."""
    return Path(git(start, "rev-parse", "--show-toplevel").strip())


def default_ref(repo: Path) -> str:
    """`origin/main` when the repository has it, else `HEAD`."""
    wanted = DEFAULT_REMOTE_REF + "^{commit}"
    probe = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", wanted],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return DEFAULT_REMOTE_REF if probe.returncode == 0 else "HEAD"


def stack_in_repo(stack: str, repo: Path) -> Path | None:
    """STACK's file relative to the top of the repository; None for a file outside it."""
    if not names_a_file(stack):
        return stack_file_in(Path(), stack)
    try:
        return Path(stack).resolve().relative_to(repo.resolve())
    except ValueError:
        return None


def stack_argument(stack: str, repo: Path, tree: Path) -> str:
    """STACK as the render in `tree` should see it: a stack name, or a path moved into tree."""
    if not names_a_file(stack):
        return stack
    inside = stack_in_repo(stack, repo)
    # A stack file outside the repository is the same file for both renders.
    return str(tree / inside) if inside is not None else str(Path(stack).resolve())


def render_tree(tree: Path, stack: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`python -m infra.cli render` with tree's own code and stacks (cwd, PYTHONPATH and the
    project directory are tree)."""
    env = dict(os.environ)
    # tree first: an installed llm-infra (editable or not) must not supply REF's code.
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env[PROJECT_ENV] = str(tree)
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", stack, "--out", str(out)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


def normalize_mtimes(root: Path) -> None:
    """Set every mtime under root to the epoch, so diff's headers carry no render time."""
    for path in [root, *root.rglob("*")]:
        os.utime(path, (0, 0), follow_symlinks=False)


def diff_dirs(workdir: Path, old: str, new: str) -> tuple[int, str]:
    """`diff -u -r -N old new` run in workdir, the marker left out: (exit status, output)."""
    result = subprocess.run(
        ["diff", "-u", "-r", "-N", "-x", RENDER_MARKER, old, new],
        cwd=workdir, capture_output=True, text=True, check=False, env={**os.environ, "TZ": "UTC"},
    )  # fmt: skip
    if result.returncode > EXIT_DIFFERENT:
        raise DiffError(f"diff failed: {result.stderr.strip()}")
    return result.returncode, result.stdout


def compare_renders(workdir: Path, old: str, new: str) -> tuple[int, str, list[Change]]:
    """(exit status, text, changes) of two render directories under workdir: the text is the
    per-resource summary, a blank line and the unified diff; empty when nothing differs."""
    status, patch = diff_dirs(workdir, old, new)
    if status == EXIT_SAME:
        return status, "", []
    changes = render_changes(workdir / old, workdir / new)
    return status, summary(changes) + "\n" + patch, changes


def stack_diff(
    stack: str, against: str | None = None, start: Path | None = None, *, cache: bool = True
) -> tuple[int, str]:
    """(exit status, summary and unified diff) of STACK's render at `against` versus the
    working tree."""
    status, text, _ = stack_comparison(stack, against, start, cache=cache)
    return status, text


def render_ref(repo: Path, ref: str, stack: str, out: Path, *, cache: bool) -> bool:
    """Render STACK as commit REF has it into out, from a render of the same commit kept by an
    earlier diff when there is one; False when REF has no such stack (nothing is written)."""
    inside = stack_in_repo(stack, repo)
    if inside is not None:
        probe = subprocess.run(
            ["git", "-C", str(repo), "cat-file", "-e", f"{ref}:{inside.as_posix()}"],
            capture_output=True, check=False,
        )  # fmt: skip
        if probe.returncode != 0:
            return False
    key = None
    if cache and inside is not None:
        tree = git(repo, "rev-parse", ref + "^{tree}").strip()
        # What the render inherits; render_tree sets the project variable to the tree itself.
        inherited = {name: value for name, value in os.environ.items() if name != PROJECT_ENV}
        key = render_key(tree, inside.as_posix(), inherited)
        kept = cached_render(key)
        if kept is not None:
            try:
                shutil.copytree(kept, out, symlinks=True)
                return True
            except OSError:
                # Removed by another diff's pruning while it was read: render it again.
                shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="llm-infra-ref-") as tmp:
        worktree = Path(tmp) / "tree"
        git(repo, "worktree", "add", "--detach", "--quiet", str(worktree), ref)
        try:
            base = render_tree(worktree, stack_argument(stack, repo, worktree), out)
        finally:
            git(repo, "worktree", "remove", "--force", str(worktree))
    if base.returncode != 0:
        raise DiffError(f"render of {stack} at {ref} failed:\n{base.stderr.strip()}")
    if key is not None:
        keep_render(key, out)
    return True


def stack_comparison(
    stack: str, against: str | None = None, start: Path | None = None, *, cache: bool = True
) -> tuple[int, str, list[Change]]:
    """(exit status, text, resource changes) of STACK's render at `against` versus the
    working tree. The two renders run at once."""
    repo = repo_root(start or Path.cwd())
    ref = against or default_ref(repo)
    git(repo, "rev-parse", "--verify", "--quiet", ref + "^{commit}")
    name = resolve_stack(stack)[0]
    with tempfile.TemporaryDirectory(prefix="llm-infra-diff-") as tmp:
        work = Path(tmp)
        (work / "a").mkdir()
        (work / "b").mkdir()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            head_render = pool.submit(
                render_tree, repo, stack_argument(stack, repo, repo), work / "b" / name
            )
            base_render = pool.submit(render_ref, repo, ref, stack, work / "a" / name, cache=cache)
            head = head_render.result()
            base_render.result()  # a stack that is new in the working tree: every file is added
        if head.returncode != 0:
            raise DiffError(f"render of {stack} in the working tree failed:\n{head.stderr.strip()}")
        normalize_mtimes(work / "a")
        normalize_mtimes(work / "b")
        return compare_renders(work, f"a/{name}", f"b/{name}")


def add_parser(sub: Subparsers) -> None:
    """`llm-infra diff STACK [--against REF]` or `llm-infra diff --renders OLD NEW`."""
    parser = sub.add_parser("diff", output=True)
    parser.add_argument(
        "stack", nargs="?", help="stack name (stacks/Pulumi.NAME.yaml) or stack file"
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help=f"git ref to compare with (default: {DEFAULT_REMOTE_REF} if it exists, else HEAD)",
    )
    parser.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="render REF again instead of reusing its render kept by an earlier diff",
    )
    parser.add_argument(
        "--renders",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="compare two render directories instead of rendering (default: render STACK)",
    )
    parser.set_defaults(run=run)


def coloured(text: str) -> str:
    """The diff text with ANSI colours: actions in the summary, added and removed lines."""
    lines = []
    for line in text.splitlines(keepends=True):
        colour = None
        if line.startswith(("+++", "---")):
            colour = "1"
        elif line[:1] in _COLOURS:
            colour = _COLOURS[line[0]]
        elif ": " in line and not line.startswith((" ", "diff ")):
            action = line.split(": ", 1)[1].split(" ", 1)[0].strip()
            colour = _ACTION_COLOURS.get(action)
        body = line.rstrip("\n")
        lines.append(f"\x1b[{colour}m{body}\x1b[0m" + line[len(body) :] if colour else line)
    return "".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the summary and the diff; 0 same, 1 different, 2 trouble."""
    try:
        if args.renders:
            if args.stack or args.against:
                raise DiffError("--renders compares two directories: give no STACK or --against")
            old, new = (Path(path) for path in args.renders)
            for path in (old, new):
                if path.exists() and not (path / "resources.json").is_file():
                    raise DiffError(f"--renders: {path} is not a render (no resources.json)")
            status, text, changes = compare_renders(Path.cwd(), str(old), str(new))
        elif args.stack is None:
            raise DiffError("name a STACK (or --renders OLD NEW)")
        else:
            status, text, changes = stack_comparison(args.stack, args.against, cache=args.cache)
    except DiffError as exc:
        print(f"llm-infra diff: {exc}", file=sys.stderr)
        return EXIT_TROUBLE
    if args.output == "json":
        print_json(
            {
                "changed": status == EXIT_DIFFERENT,
                "resources": [change.to_json() for change in changes],
                "diff": text,
            }
        )
        return status
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    sys.stdout.write(coloured(text) if colour else text)
    return status
