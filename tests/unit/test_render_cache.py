"""The cache of commit renders `llm-infra diff` reuses: its key and its store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra import render_cache
from infra.render_cache import cached_render, keep_render, render_key

TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
ENV = {"PATH": "/usr/bin", "HOME": "/home/u"}


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def a_render(root: Path, text: str) -> Path:
    render = root / text
    (render / "files").mkdir(parents=True)
    (render / "resources.json").write_text(text)
    (render / "files" / "Caddyfile").write_text(text)
    return render


@pytest.mark.parametrize(
    "changed",
    [
        {"tree": "0" * 40},
        {"stack": "mi300x"},
        {"env": {**ENV, "PYTHONPATH": "/elsewhere"}},
        {"env": {**ENV, "PULUMI_CONFIG": "{}"}},
        {"env": {**ENV, "LLM_INFRA_CPU_VARIANT": "haswell"}},
        {"env": {**ENV, "HF_ENDPOINT": "http://127.0.0.1:1"}},
    ],
)
def test_the_key_follows_what_a_render_reads(changed: dict[str, object]) -> None:
    base: dict[str, object] = {"tree": TREE, "stack": "strix-halo", "env": ENV}
    assert render_key(**{**base, **changed}) != render_key(**base)  # type: ignore[arg-type]


def test_the_key_ignores_variables_no_render_reads() -> None:
    noisy = {**ENV, "TERM": "xterm", "PWD": "/tmp", "SHLVL": "3"}
    assert render_key(TREE, "strix-halo", noisy) == render_key(TREE, "strix-halo", ENV)


def test_a_kept_render_comes_back_whole(tmp_path: Path) -> None:
    key = render_key(TREE, "strix-halo", ENV)
    assert cached_render(key) is None
    keep_render(key, a_render(tmp_path, "one"))
    kept = cached_render(key)
    assert kept is not None
    assert (kept / "resources.json").read_text() == "one"
    assert (kept / "files" / "Caddyfile").read_text() == "one"


def test_the_least_recently_used_go_beyond_keep(tmp_path: Path) -> None:
    keys = [render_key(TREE, f"stack-{n}", ENV) for n in range(render_cache.KEEP)]
    for age, key in enumerate(keys):
        keep_render(key, a_render(tmp_path, key))
        os.utime(render_cache.renders_dir() / key, (1_000_000 + age, 1_000_000 + age))
    # The oldest is used again: it is the most recent use now, and the next two go instead.
    assert cached_render(keys[0]) is not None
    for newest in ("newer", "newest"):
        keep_render(render_key(TREE, newest, ENV), a_render(tmp_path, newest))
    left = {path.name for path in render_cache.renders_dir().iterdir()}
    assert len(left) == render_cache.KEEP
    assert keys[0] in left and keys[3] in left
    assert keys[1] not in left and keys[2] not in left


def test_a_half_written_entry_is_never_a_render(tmp_path: Path) -> None:
    key = render_key(TREE, "strix-halo", ENV)
    aside = render_cache.renders_dir() / f".{key}.12345.tmp" / "render"
    aside.mkdir(parents=True)
    assert cached_render(key) is None
    # A writer that died long ago leaves nothing behind once the cache is written again.
    os.utime(aside.parent, (1_000_000, 1_000_000))
    keep_render(key, a_render(tmp_path, "one"))
    assert not aside.parent.exists()
    assert cached_render(key) is not None


def test_a_cache_that_cannot_be_written_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_directory = tmp_path / "cache-file"
    not_a_directory.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_directory))
    key = render_key(TREE, "strix-halo", ENV)
    keep_render(key, a_render(tmp_path, "one"))
    assert cached_render(key) is None
