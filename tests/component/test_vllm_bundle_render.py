"""`render mi300x` writes the host's bundle: every file and command script comes from it."""

from __future__ import annotations

from pathlib import Path

import pytest

import components.vllm.component as component
from components.vllm.bundle import HostBundle, host_bundle
from components.vllm.inputs import VllmRocmServerArgs
from tests.conftest import write_stack
from tests.support.render import render
from tests.support.stack_edits import edited


def test_every_file_and_command_the_mi300x_render_writes_comes_from_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundles: list[HostBundle] = []

    def recording(args: VllmRocmServerArgs, stack: str) -> HostBundle:
        bundle = host_bundle(args, stack)
        # The same inputs again: the same bundle (nothing read from Pulumi or the clock).
        assert host_bundle(args, stack) == bundle
        bundles.append(bundle)
        return bundle

    monkeypatch.setattr(component, "host_bundle", recording)
    out = tmp_path / "mi300x"
    result = render("mi300x", out)
    assert result.returncode == 0, result.stderr
    (bundle,) = bundles
    written = {
        "/" + str(path.relative_to(out / "files")): path.read_bytes()
        for path in sorted((out / "files").rglob("*"))
        if path.is_file()
    }
    expected = {
        f.remote_path: f.text.encode() if f.text is not None else Path(str(f.source)).read_bytes()
        for f in bundle.files.values()
    }
    assert written == expected
    scripts = {
        path.name.split("-", 1)[1].removesuffix(".sh"): path.read_text()
        for path in (out / "commands").iterdir()
    }
    assert scripts == {f"vllm-{suffix}": c.script for suffix, c in bundle.commands.items()}


def test_the_rendered_files_state_the_stacks_context_length_not_the_seeds(tmp_path: Path) -> None:
    stack = write_stack(
        tmp_path / "Pulumi.mi300x.yaml", edited("mi300x", [("server", "maxModelLen", 65536)])
    )
    out = tmp_path / "out"
    result = render(str(stack), out)
    assert result.returncode == 0, result.stderr
    texts = {
        path: path.read_text()
        for path in [*out.rglob("*")]
        if path.is_file() and path.suffix != ".payload"
    }
    assert "# A 64k-token prompt is minutes of prefill" in texts[out / "files/opt/llm/Caddyfile"]
    assert "'65536'" in texts[out / "files/opt/llm/compose.yaml"]
    stale = sorted(
        str(path.relative_to(out))
        for path, text in texts.items()
        if "256k" in text.lower() or "262144" in text or "262,144" in text
    )
    assert stale == []
