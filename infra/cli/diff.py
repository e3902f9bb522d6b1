"""`llm-infra diff STACK [--against REF]`: what a change does to a stack's render.

Renders STACK twice, from a `git worktree` of REF (with REF's own code and stack files) and from
the working tree, and prints `diff -u -r -N` of the two render directories: the same text the
preview workflow posts on a pull request. Exit status as diff's: 0 identical, 1 different,
2 trouble (git, a failed render of the working tree).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.cli.common import Subparsers, add_stack_argument
from infra.config import names_a_file, resolve_stack

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_TROUBLE = 2
DEFAULT_REMOTE_REF = "origin/main"
# What `llm-infra render` exits with when the stack is unknown or invalid.
_RENDER_CONFIG_ERROR = 2


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


def stack_argument(stack: str, repo: Path, tree: Path) -> str:
    """STACK as the render in `tree` should see it: a stack name, or a path moved into tree."""
    if not names_a_file(stack):
        return stack
    absolute = Path(stack).resolve()
    try:
        return str(tree / absolute.relative_to(repo.resolve()))
    except ValueError:
        # A stack file outside the repository is the same file for both renders.
        return str(absolute)


def render_tree(tree: Path, stack: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`python -m infra.cli render` with tree's own code (cwd and PYTHONPATH = tree)."""
    env = dict(os.environ)
    # tree first: an installed llm-infra (editable or not) must not supply REF's code.
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "render", stack, "--out", str(out)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


def normalize_mtimes(root: Path) -> None:
    """Set every mtime under root to the epoch, so diff's headers carry no render time."""
    for path in [root, *root.rglob("*")]:
        os.utime(path, (0, 0), follow_symlinks=False)


def diff_dirs(workdir: Path, old: str, new: str) -> tuple[int, str]:
    """`diff -u -r -N old new` run in workdir: (exit status, output)."""
    result = subprocess.run(
        ["diff", "-u", "-r", "-N", old, new],
        cwd=workdir, capture_output=True, text=True, check=False, env={**os.environ, "TZ": "UTC"},
    )  # fmt: skip
    if result.returncode > EXIT_DIFFERENT:
        raise DiffError(f"diff failed: {result.stderr.strip()}")
    return result.returncode, result.stdout


def stack_diff(
    stack: str, against: str | None = None, start: Path | None = None
) -> tuple[int, str]:
    """(exit status, unified diff) of STACK's render at `against` versus the working tree."""
    repo = repo_root(start or Path.cwd())
    ref = against or default_ref(repo)
    git(repo, "rev-parse", "--verify", "--quiet", ref + "^{commit}")
    name = resolve_stack(stack)[0]
    with tempfile.TemporaryDirectory(prefix="llm-infra-diff-") as tmp:
        work = Path(tmp)
        worktree = work / "ref"
        git(repo, "worktree", "add", "--detach", "--quiet", str(worktree), ref)
        try:
            (work / "a").mkdir()
            (work / "b").mkdir()
            base = render_tree(worktree, stack_argument(stack, repo, worktree), work / "a" / name)
            head = render_tree(repo, stack_argument(stack, repo, repo), work / "b" / name)
        finally:
            git(repo, "worktree", "remove", "--force", str(worktree))
        if head.returncode != 0:
            raise DiffError(f"render of {stack} in the working tree failed:\n{head.stderr.strip()}")
        if base.returncode == _RENDER_CONFIG_ERROR and "no stack file" in base.stderr:
            # A stack that is new in the working tree: every file shows as added.
            shutil.rmtree(work / "a" / name, ignore_errors=True)
        elif base.returncode != 0:
            raise DiffError(f"render of {stack} at {ref} failed:\n{base.stderr.strip()}")
        normalize_mtimes(work / "a")
        normalize_mtimes(work / "b")
        return diff_dirs(work, f"a/{name}", f"b/{name}")


def add_parser(sub: Subparsers) -> None:
    """`llm-infra diff STACK [--against REF]`."""
    parser = sub.add_parser(
        "diff", help="the render diff of a stack against a git ref (what the PR preview posts)"
    )
    add_stack_argument(parser)
    parser.add_argument(
        "--against",
        metavar="REF",
        help=f"git ref to compare with (default: {DEFAULT_REMOTE_REF} if it exists, else HEAD)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the diff; 0 same, 1 different, 2 trouble."""
    try:
        status, text = stack_diff(args.stack, args.against)
    except DiffError as exc:
        print(f"llm-infra diff: {exc}", file=sys.stderr)
        return EXIT_TROUBLE
    sys.stdout.write(text)
    return status
