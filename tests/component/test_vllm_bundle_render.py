"""`render mi300x` writes the host's bundle: every file and command script comes from it."""

from __future__ import annotations

from pathlib import Path

import pytest

import components.vllm.component as component
from components.vllm.bundle import HostBundle, host_bundle
from components.vllm.inputs import VllmRocmServerArgs
from tests.support.render import render


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
