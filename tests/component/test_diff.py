"""`llm-infra diff`: a stack's render at a git ref against the working tree, in a temp clone."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from infra import cli
from infra.cli import diff

ROOT = Path(__file__).resolve().parents[2]


def run_git(repo: Path, *args: str) -> str:
    """git in repo, failing the test on error."""
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return result.stdout


@pytest.fixture(scope="module")
def render_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's cache of REF renders: tests that diff against the same commit share it."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(autouse=True)
def _cache_of_this_module(render_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(render_cache))


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The trees `llm-infra diff` renders from, in order."""
    seen: list[Path] = []
    real = diff.render_tree

    def counted(tree: Path, stack: str, out: Path) -> subprocess.CompletedProcess[str]:
        seen.append(tree)
        return real(tree, stack, out)

    monkeypatch.setattr(diff, "render_tree", counted)
    return seen


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of this repository's HEAD: its own working tree, worktrees and remotes."""
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    return target


def replace_in(path: Path, old: str, new: str) -> None:
    """Edit a file in the clone's working tree, failing if `old` is not there."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_unchanged_working_tree_prints_nothing_and_exits_0(
    clone: Path,
    renders: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(clone)
    assert cli.main(["diff", "mi300x", "--against", "HEAD"]) == 0
    assert capsys.readouterr().out == ""
    # The working tree holds HEAD's tree: one render serves both sides (none where another test
    # of the module kept HEAD's render), and it is kept.
    assert renders in ([], [clone])
    renders.clear()
    assert cli.main(["diff", "mi300x", "--against", "HEAD"]) == 0
    assert renders == []
    # --no-cache renders again, still once for both sides.
    assert cli.main(["diff", "mi300x", "--against", "HEAD", "--no-cache"]) == 0
    assert renders == [clone]


def test_the_working_tree_id_follows_changed_and_untracked_files_not_ignored_ones(
    clone: Path,
) -> None:
    head = run_git(clone, "rev-parse", "HEAD^{tree}").strip()
    assert diff.working_tree_id(clone) == head
    (clone / "rendered").mkdir()
    (clone / "rendered" / "out.yaml").write_text("ignored\n")
    assert diff.working_tree_id(clone) == head
    stack = clone / "stacks/Pulumi.mi300x.yaml"
    original = stack.read_text()
    replace_in(stack, "198.51.100.0/24", "198.51.100.0/25")
    edited = diff.working_tree_id(clone)
    assert edited not in (None, head)
    assert diff.working_tree_id(clone) == edited  # the same content, the same id
    replace_in(stack, "198.51.100.0/25", "198.51.100.0/26")
    assert diff.working_tree_id(clone) not in (None, head, edited)
    stack.write_text(original)
    assert diff.working_tree_id(clone) == head
    (clone / "stacks/Pulumi.new.yaml").write_text("config: {}\n")
    untracked = diff.working_tree_id(clone)
    assert untracked not in (None, head)
    (clone / "stacks/Pulumi.new.yaml").chmod(0o755)
    assert diff.working_tree_id(clone) not in (None, head, untracked)
    (clone / "stacks/Pulumi.new.yaml").unlink()
    (clone / "README.md").unlink()
    assert diff.working_tree_id(clone) not in (None, head)
    # A large file (a model left in the checkout) is not read: that working tree is not kept.
    with (clone / "model.gguf").open("wb") as big:
        big.truncate(diff.WORKING_FILE_LIMIT + 1)
    assert diff.working_tree_id(clone) is None
    # A diff never writes the index: a plain git status would refresh a touched file's entry.
    index = clone / ".git/index"
    before = index.read_bytes()
    os.utime(clone / "pyproject.toml", (1, 1))
    diff.working_tree_id(clone)
    assert index.read_bytes() == before


def test_changed_stack_value_shows_the_flag_and_exits_1(
    clone: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replace_in(clone / "stacks/Pulumi.strix-halo.yaml", "gpuLayers: 40", "gpuLayers: 42")
    monkeypatch.chdir(clone)
    assert cli.main(["diff", "strix-halo", "--against", "HEAD"]) == 1
    out = capsys.readouterr().out
    # The per-resource summary first, then the file diff, without the render's marker file.
    assert out.startswith(
        "Deployment llm/deepseek-v4-flash-0731: update (pod restart, model reload)\n"
        "resources: 1 to update\n\n"
    ), out
    assert ".llm-infra-render.json" not in out.replace("-x .llm-infra-render.json", "")
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    assert "--- a/strix-halo/manifests.yaml" in out
    assert "+++ b/strix-halo/manifests.yaml" in out
    # The -ngl value in the Deployment's args, as `diff -u` shows it.
    assert re.search(r"^ +- -ngl\n-        - '40'\n\+        - '42'$", out, re.MULTILINE), out
    # Headers carry the epoch, not the time of the render: the same change gives the same text.
    assert "1970-01-01 00:00:00" in out


def test_ref_is_rendered_with_its_own_code_and_stacks_in_a_worktree_removed_afterwards(
    clone: Path, renders: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A code change (not a stack change) shows only if each side ran its own tree's code.
    replace_in(
        clone / "components/k8s/metadata.py",
        '"app.kubernetes.io/managed-by": "llm-infra"',
        '"app.kubernetes.io/managed-by": "llm-infra-next"',
    )
    replace_in(clone / "stacks/Pulumi.strix-halo.yaml", "gpuLayers: 40", "gpuLayers: 42")
    # LLM_INFRA_PROJECT points at another checkout: neither render may read that one's stacks.
    monkeypatch.setenv("LLM_INFRA_PROJECT", str(ROOT))
    # Not from the cache: a render of HEAD kept by another test proves nothing about this one.
    status, out = diff.stack_diff("strix-halo", "HEAD", start=clone, cache=False)
    assert status == 1
    assert "-    app.kubernetes.io/managed-by: llm-infra\n" in out
    assert "+    app.kubernetes.io/managed-by: llm-infra-next\n" in out
    assert re.search(r"^-        - '40'\n\+        - '42'$", out, re.MULTILINE), out
    assert len(renders) == 2 and renders.count(clone) == 1  # the other: a worktree of HEAD
    trees = [
        line.split(" ", 1)[1]
        for line in run_git(clone, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    assert trees == [str(clone)]


def test_stack_new_in_the_working_tree_shows_every_file_as_added(
    clone: Path, renders: list[Path]
) -> None:
    shutil.copy(clone / "stacks/Pulumi.mi300x.yaml", clone / "stacks/Pulumi.fresh.yaml")
    status, out = diff.stack_diff("fresh", "HEAD", start=clone)
    assert status == 1
    assert renders == [clone]  # HEAD has no such stack file: nothing to render there
    assert "+++ b/fresh/resources.json" in out
    assert not re.search(r"^-[^-]", out, re.MULTILINE), "nothing can be removed from nothing"


def test_default_ref_is_origin_main_when_present_else_head(clone: Path) -> None:
    assert diff.default_ref(clone) == "origin/main"
    run_git(clone, "remote", "remove", "origin")
    assert diff.default_ref(clone) == "HEAD"


def test_unknown_ref_is_trouble_with_exit_2(
    clone: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(clone)
    assert cli.main(["diff", "strix-halo", "--against", "no-such-ref"]) == 2
    assert "no-such-ref" in capsys.readouterr().err


def test_json_output_lists_each_resource_change(
    clone: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replace_in(clone / "stacks/Pulumi.strix-halo.yaml", "gpuLayers: 40", "gpuLayers: 42")
    monkeypatch.chdir(clone)
    assert cli.main(["diff", "strix-halo", "--against", "HEAD", "-o", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["changed"] is True
    assert document["resources"] == [
        {
            "type": "kubernetes:apps/v1:Deployment",
            "name": "deepseek-v4-flash-0731-deployment",
            "display": "Deployment llm/deepseek-v4-flash-0731",
            "action": "update",
            "effects": ["pod restart", "model reload"],
        }
    ]
    assert "+        - '42'" in document["diff"]


def test_renders_compares_two_directories_and_colours_only_a_terminal(tmp_path: Path) -> None:
    old = tmp_path / "a" / "strix-halo"
    shutil.copytree(ROOT / "tests/golden/strix-halo", old)
    new = tmp_path / "b" / "strix-halo"
    shutil.copytree(old, new)
    resources = json.loads((new / "resources.json").read_text())
    resources[0]["inputs"]["extra"] = 1
    (new / "resources.json").write_text(json.dumps(resources))
    text = diff.coloured(diff.compare_renders(tmp_path, "a/strix-halo", "b/strix-halo")[1])
    first = text.splitlines()[0]
    assert first.startswith("\x1b[33m") and first.endswith("\x1b[0m")
    assert "\x1b[32m+" in text and "\x1b[31m-" in text


def test_mi300x_file_change_shows_and_each_side_is_rendered_once_until_it_changes(
    clone: Path, renders: list[Path]
) -> None:
    replace_in(clone / "stacks/Pulumi.mi300x.yaml", "198.51.100.0/24", "198.51.100.0/25")
    first = diff.stack_diff("mi300x", "HEAD", start=clone)
    assert first[0] == 1
    assert "+++ b/mi300x/files/opt/llm/Caddyfile" in first[1]
    assert "+\t@denied not remote_ip 198.51.100.0/25" in first[1]
    # The same commit and working tree again: both renders are kept, the text is the same.
    renders.clear()
    assert diff.stack_diff("mi300x", "HEAD", start=clone) == first
    assert renders == []
    # The change committed and another made: HEAD names another tree, rendered afresh (a render
    # kept under the ref's name would show the old /24 allowlist on the left here).
    run_git(clone, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "x")
    replace_in(clone / "stacks/Pulumi.mi300x.yaml", "198.51.100.0/25", "198.51.100.0/26")
    renders.clear()
    status, out = diff.stack_diff("mi300x", "HEAD", start=clone)
    assert status == 1
    assert "-\t@denied not remote_ip 198.51.100.0/25" in out
    assert "+\t@denied not remote_ip 198.51.100.0/26" in out
    assert len(renders) == 2
