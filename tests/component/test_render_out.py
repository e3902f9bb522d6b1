"""`render --out DIR`: a directory the render owns (its marker); it deletes only its own files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from infra.render import Rendered
from infra.render_out import RENDER_MARKER, RenderOutError, write


def host_render(commands: dict[str, str]) -> Rendered:
    """A render with a remote file and commands, as the docker-host target makes them."""
    return Rendered(
        resources=[{"type": "command:remote:Command", "name": "x", "parent": None, "inputs": {}}],
        outputs={"url": "https://llm.example.com"},
        files={"/opt/llm/compose.yaml": b"services: {}\n"},
        commands=commands,
    )


def test_a_render_records_what_it_wrote_and_replaces_only_that(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(host_render({"01-preflight.sh": "true", "02-old-step.sh": "true"}), out)
    marker = json.loads((out / RENDER_MARKER).read_text())
    assert marker["written"] == sorted(
        [
            "resources.json", "outputs.json", "files/opt/llm/compose.yaml",
            "commands/01-preflight.sh", "commands/02-old-step.sh",
        ]
    )  # fmt: skip
    # What someone else put beside the render, also inside its folders.
    (out / "notes.md").write_text("mine")
    (out / "files" / "opt" / "keep.txt").write_text("mine")
    (out / "commands" / "README").write_text("mine")
    write(host_render({"01-preflight.sh": "echo again"}), out)
    assert not (out / "commands" / "02-old-step.sh").exists()
    assert (out / "commands" / "01-preflight.sh").read_text() == "echo again\n"
    for mine in ("notes.md", "files/opt/keep.txt", "commands/README"):
        assert (out / mine).read_text() == "mine"
    assert "commands/02-old-step.sh" not in json.loads((out / RENDER_MARKER).read_text())["written"]


def test_empty_folders_the_last_render_made_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(host_render({"01-preflight.sh": "true"}), out)
    write(Rendered(resources=[], outputs={}), out)
    names = sorted(p.name for p in out.iterdir())
    assert names == [RENDER_MARKER, "outputs.json", "resources.json"]


def test_a_directory_render_did_not_write_is_refused_and_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "project"
    (out / "files").mkdir(parents=True)
    (out / "files" / "precious.txt").write_text("keep")
    (out / "resources.json").write_text("someone else's")
    with pytest.raises(RenderOutError) as caught:
        write(host_render({"01-preflight.sh": "true"}), out)
    assert f"not written by llm-infra render (no {RENDER_MARKER})" in caught.value.problems[0]
    assert (out / "files" / "precious.txt").read_text() == "keep"
    assert (out / "resources.json").read_text() == "someone else's"
    assert not (out / RENDER_MARKER).exists()


def test_a_file_in_the_way_that_no_render_wrote_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(Rendered(resources=[], outputs={}), out)
    (out / "files" / "opt" / "llm").mkdir(parents=True)
    (out / "files" / "opt" / "llm" / "compose.yaml").write_text("hand-written")
    with pytest.raises(RenderOutError, match=re.escape("files/opt/llm/compose.yaml exists")):
        write(host_render({}), out)
    assert (out / "files" / "opt" / "llm" / "compose.yaml").read_text() == "hand-written"


def test_a_marker_pointing_outside_the_directory_deletes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out.mkdir()
    (out / RENDER_MARKER).write_text(json.dumps({"written": ["../victim.txt"]}))
    with pytest.raises(RenderOutError, match=re.escape("lists '../victim.txt'")):
        write(host_render({}), out)
    assert victim.read_text() == "keep"


def test_a_new_or_empty_directory_is_taken(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "nested"):
        written = write(Rendered(resources=[], outputs={}), out)
        assert [p.name for p in written] == ["resources.json", "outputs.json"]
        assert (out / RENDER_MARKER).is_file()


def test_a_render_from_before_the_marker_is_recognised_and_replaced(tmp_path: Path) -> None:
    out = tmp_path / "rendered" / "mi300x"
    (out / "commands").mkdir(parents=True)
    (out / "commands" / "07-gone.sh").write_text("true\n")
    resource: dict[str, object] = {"type": "command:remote:Command", "name": "x", "inputs": {}}
    (out / "resources.json").write_text(json.dumps([resource]))
    (out / "outputs.json").write_text("{}\n")
    write(host_render({"01-preflight.sh": "true"}), out)
    assert not (out / "commands" / "07-gone.sh").exists()
    assert (out / RENDER_MARKER).is_file()


def rendered_once(tmp_path: Path) -> Path:
    """A directory an earlier render owns."""
    out = tmp_path / "out"
    write(host_render({"01-up.sh": "true"}), out)
    return out


def test_a_symlinked_folder_named_in_the_marker_deletes_nothing_outside(tmp_path: Path) -> None:
    out = rendered_once(tmp_path)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    (out / "link").symlink_to(outside)
    (out / RENDER_MARKER).write_text(json.dumps({"written": ["link/precious.txt"]}))
    with pytest.raises(RenderOutError, match=re.escape("link is a symbolic link")):
        write(host_render({}), out)
    assert (outside / "precious.txt").read_text() == "keep"


def test_a_symlinked_files_folder_is_never_written_through(tmp_path: Path) -> None:
    out = rendered_once(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(out / "files")
    (out / "files").symlink_to(outside)
    with pytest.raises(RenderOutError, match=re.escape("files is a symbolic link")):
        write(host_render({}), out)
    assert list(outside.iterdir()) == []


def test_a_dangling_outputs_symlink_is_never_written_through(tmp_path: Path) -> None:
    out = rendered_once(tmp_path)
    target = tmp_path / "created-outside.json"
    (out / "outputs.json").unlink()
    (out / "outputs.json").symlink_to(target)
    with pytest.raises(RenderOutError, match=re.escape("outputs.json is a symbolic link")):
        write(host_render({}), out)
    assert not target.exists()
    # Nothing was written: the earlier render's files are all still there.
    assert (out / "resources.json").is_file()


def test_a_symlinked_marker_is_refused(tmp_path: Path) -> None:
    out = rendered_once(tmp_path)
    elsewhere = tmp_path / "marker.json"
    (out / RENDER_MARKER).rename(elsewhere)
    (out / RENDER_MARKER).symlink_to(elsewhere)
    with pytest.raises(RenderOutError, match="is a symbolic link"):
        write(host_render({}), out)
    assert json.loads(elsewhere.read_text())["written"]


def test_a_symlink_in_an_unmarked_older_render_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "old"
    out.mkdir()
    resource = {"type": "command:remote:Command", "name": "x", "inputs": {}}
    (out / "resources.json").write_text(json.dumps([resource]))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.sh").write_text("keep")
    (out / "commands").symlink_to(outside)
    with pytest.raises(RenderOutError, match=re.escape("commands is a symbolic link")):
        write(host_render({}), out)
    assert (outside / "keep.sh").read_text() == "keep"


@pytest.mark.parametrize(
    "marker",
    [
        {"written": 5},
        {"written": [5]},
        {"written": ["resources.json"], "extra": 1},
        ["resources.json"],
        {"written": ["./resources.json"]},
        {"written": [""]},
    ],
    ids=["count", "number-entry", "extra-key", "a-list", "dot-part", "empty-name"],
)
def test_a_marker_not_of_the_documented_shape_is_refused(tmp_path: Path, marker: object) -> None:
    out = rendered_once(tmp_path)
    (out / RENDER_MARKER).write_text(json.dumps(marker))
    with pytest.raises(RenderOutError, match=re.escape(RENDER_MARKER)):
        write(host_render({}), out)
    assert (out / "resources.json").is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"written": [' + b'"a",' * 400_000 + b'"a"]}', "larger than 1048576 bytes"),
    ],
    ids=["nested", "huge"],
)
def test_a_hostile_marker_is_refused_reading_no_more_than_its_limit(
    tmp_path: Path, content: bytes, message: str
) -> None:
    out = rendered_once(tmp_path)
    (out / RENDER_MARKER).write_bytes(content)
    with pytest.raises(RenderOutError, match=message):
        write(host_render({}), out)
    assert (out / "resources.json").is_file()
