"""`llm-infra diff STACK [--against REF]`: what a change does to a stack's render.

Renders STACK twice, from a `git worktree` of REF (with REF's own code and stack files) and from
the working tree, and prints one line per changed resource (create, update, replace, delete, and
what that restarts: `infra.render_diff`), then `diff -u -r -N` of the two render directories
(without the render's marker file): the same text the preview workflow posts on a pull request
(it runs `llm-infra diff --renders A B`). Exit status as diff's: 0 identical, 1 different,
2 trouble (git, a failed render of the working tree).

Each side's render is kept in the user's cache (`infra.render_cache`), keyed by what the side
holds (REF's tree; the working tree's HEAD tree and changed files) and everything else a render
reads: diffing again renders only what changed since, and an unchanged working tree shares REF's
render. `--no-cache` renders again instead of reusing kept renders.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
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
# A changed working-tree file larger than this (a model left in the checkout) is not read to
# key the working tree's render: that render is then not kept.
WORKING_FILE_LIMIT = 16 * 1024 * 1024


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


def working_tree_id(repo: Path) -> str | None:
    """What the working tree holds, as an id a render can be kept under: HEAD's tree id when
    nothing tracked changed and nothing untracked (and not ignored) is there, so an unchanged
    checkout shares its commit's render; else a digest of HEAD's tree and each changed path's
    state. None (never kept) without a HEAD, or with a changed file too large to read quickly."""
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "HEAD^{tree}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if head.returncode != 0:
        return None
    status = git(
        repo,
        "--no-optional-locks",  # a diff never writes the user's index
        "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames",
    )  # fmt: skip
    paths = sorted({entry[3:] for entry in status.split("\0") if entry})
    if not paths:
        return head.stdout.strip()
    digest = hashlib.sha256(head.stdout.strip().encode())
    for name in paths:
        path = repo / name
        digest.update(b"\0" + name.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            if path.stat().st_size > WORKING_FILE_LIMIT:
                return None
            mode = b"x:" if os.access(path, os.X_OK) else b"f:"
            digest.update(mode + hashlib.sha256(path.read_bytes()).digest())
        elif path.exists():
            return None  # a nested repository or other non-file: not worth describing
        else:
            digest.update(b"gone")
    return "worktree-" + digest.hexdigest()


def kept_copy(key: str | None, out: Path) -> bool:
    """Copy the render kept under key into out; False when there is none."""
    kept = cached_render(key) if key is not None else None
    if kept is None:
        return False
    try:
        shutil.copytree(kept, out, symlinks=True)
        return True
    except OSError:
        # Removed by another diff's pruning while it was read: render it again.
        shutil.rmtree(out, ignore_errors=True)
        return False


def render_key_of(repo: Path, tree: str | None, stack: str) -> str | None:
    """The cache key of STACK's render from tree (None: not kept)."""
    inside = stack_in_repo(stack, repo)
    if tree is None or inside is None:
        return None  # a stack file outside the repository is not part of any tree
    # What the render inherits; render_tree sets the project variable to the tree itself.
    inherited = {name: value for name, value in os.environ.items() if name != PROJECT_ENV}
    return render_key(tree, inside.as_posix(), inherited)


def ref_has_stack(repo: Path, ref: str, stack: str) -> bool:
    """Whether commit REF holds STACK's file (a file outside the repository: always)."""
    inside = stack_in_repo(stack, repo)
    if inside is None:
        return True
    probe = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{ref}:{inside.as_posix()}"],
        capture_output=True, check=False,
    )  # fmt: skip
    return probe.returncode == 0


def render_working_tree(repo: Path, stack: str, out: Path, key: str | None) -> None:
    """Render STACK from the working tree into out, or copy its kept render."""
    if kept_copy(key, out):
        return
    result = render_tree(repo, stack_argument(stack, repo, repo), out)
    if result.returncode != 0:
        raise DiffError(f"render of {stack} in the working tree failed:\n{result.stderr.strip()}")
    if key is not None:
        keep_render(key, out)


def render_ref(repo: Path, ref: str, stack: str, out: Path, key: str | None) -> None:
    """Render STACK as commit REF has it into out (in a `git worktree` of REF), or copy its
    kept render."""
    if kept_copy(key, out):
        return
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


def stack_comparison(
    stack: str, against: str | None = None, start: Path | None = None, *, cache: bool = True
) -> tuple[int, str, list[Change]]:
    """(exit status, text, resource changes) of STACK's render at `against` versus the
    working tree. The two renders run at once; a working tree that holds REF's tree is
    rendered once for both sides (with or without the cache)."""
    repo = repo_root(start or Path.cwd())
    ref = against or default_ref(repo)
    git(repo, "rev-parse", "--verify", "--quiet", ref + "^{commit}")
    name = resolve_stack(stack)[0]
    has_ref = ref_has_stack(repo, ref, stack)
    head_tree = working_tree_id(repo)
    ref_tree = git(repo, "rev-parse", ref + "^{tree}").strip()
    head_key = render_key_of(repo, head_tree, stack) if cache else None
    ref_key = render_key_of(repo, ref_tree, stack) if cache else None
    with tempfile.TemporaryDirectory(prefix="llm-infra-diff-") as tmp:
        work = Path(tmp)
        (work / "a").mkdir()
        (work / "b").mkdir()
        old, new = work / "a" / name, work / "b" / name
        if has_ref and head_tree == ref_tree:
            render_working_tree(repo, stack, new, head_key)
            shutil.copytree(new, old, symlinks=True)
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                head = pool.submit(render_working_tree, repo, stack, new, head_key)
                # A stack that is new in the working tree: nothing at REF, every file is added.
                base = pool.submit(render_ref, repo, ref, stack, old, ref_key) if has_ref else None
                head.result()
                if base is not None:
                    base.result()
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
        help="render again instead of reusing renders kept by an earlier diff",
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
