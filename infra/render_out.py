"""The render contract on disk: resources, outputs, manifests, files and commands written to an
out folder, replacing only what an earlier render wrote there (its marker names them).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.config import ConfigError


@dataclass
class Rendered:
    """What a program registered: resources in dependency order, and the stack outputs."""

    resources: list[dict[str, Any]]
    outputs: dict[str, Any]
    manifests: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    """Remote path → content of every file copied to a host."""
    commands: dict[str, str] = field(default_factory=dict)
    """`NN-<name>.sh` → the script each remote command creates with, in dependency order."""
    warnings: list[str] = field(default_factory=list)
    """What the program warned about (`pulumi.log.warn`), as `pulumi preview` would show it."""


# Apply order of Kubernetes kinds (as Helm installs them): what a kind needs comes first.
KIND_ORDER = (
    "Namespace", "NetworkPolicy", "ServiceAccount", "Secret", "ConfigMap",
    "PersistentVolumeClaim", "Role", "RoleBinding", "Job", "Deployment", "Service",
)  # fmt: skip


def _is_kubernetes_object(resource_type: str) -> bool:
    return resource_type.startswith("kubernetes:") and not resource_type.startswith(
        "pulumi:providers:"
    )


def kubernetes_manifests(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every Kubernetes object, in apply order (kind order, then registration order)."""
    objects = [r["inputs"] for r in resources if _is_kubernetes_object(r["type"])]

    def rank(obj: dict[str, Any]) -> int:
        kind = obj.get("kind", "")
        return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)

    ordered = sorted(objects, key=rank)
    return [_manifest_order(obj) for obj in ordered]


def _manifest_order(obj: dict[str, Any]) -> dict[str, Any]:
    head: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    return {**head, **{k: v for k, v in obj.items() if k not in head}}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings, so reviewers read scripts and sources as text."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def manifests_yaml(manifests: list[dict[str, Any]]) -> str:
    """Multi-document YAML of the manifests."""
    return yaml.dump_all(manifests, Dumper=_Dumper, sort_keys=False, width=100)


RENDER_MARKER = ".llm-infra-render.json"
"""The file that makes a directory a render's: it lists what the last render wrote there."""


class RenderOutError(ConfigError):
    """An output directory that `render` does not own: it writes nothing there."""


_CONTRACT_ENTRIES = ("resources.json", "outputs.json", "manifests.yaml", "files", "commands")


def _is_unmarked_render(out: Path) -> bool:
    """A directory an older render wrote: only the contract's entries, a render's resources."""
    entries = {entry.name for entry in out.iterdir()}
    if "resources.json" not in entries or not entries <= set(_CONTRACT_ENTRIES):
        return False
    try:
        resources = json.loads((out / "resources.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(resources, list) and all(
        isinstance(r, dict) and {"type", "name", "inputs"} <= set(r) for r in resources
    )


def _symlink_in(out: Path, name: str) -> Path | None:
    """The first symbolic link on the way from out to out/name (out itself may be one)."""
    path = out
    for part in Path(name).parts:
        path = path / part
        if path.is_symlink():
            return path
        if not path.exists():
            return None
    return None


def _refuse_symlink(out: Path, name: str) -> None:
    link = _symlink_in(out, name)
    if link is not None:
        raise RenderOutError(
            [
                f"--out {out}: {link.relative_to(out)} is a symbolic link; render never follows "
                "one inside its directory; nothing was written"
            ]
        )


MAX_MARKER_BYTES = 1024 * 1024
"""The largest render marker read (a render's list of files is a few KiB)."""


def _marker_names(out: Path, marker: Path) -> list[str]:
    """The marker's list, which must be exactly `{"written": [relative path, ...]}`."""
    shape = f'{RENDER_MARKER} is not {{"written": [relative file path, ...]}}'
    try:
        with marker.open("rb") as handle:
            raw = handle.read(MAX_MARKER_BYTES + 1)
        if len(raw) > MAX_MARKER_BYTES:
            raise ValueError(f"larger than {MAX_MARKER_BYTES} bytes")
        document = json.loads(raw)
    except RecursionError:
        raise RenderOutError(
            [f"--out {out}: unreadable {RENDER_MARKER} (nested too deeply); nothing was written"]
        ) from None
    except (OSError, ValueError) as exc:
        raise RenderOutError([f"--out {out}: unreadable {RENDER_MARKER} ({exc})"]) from None
    if not isinstance(document, dict) or set(document) != {"written"}:
        raise RenderOutError([f"--out {out}: {shape}; nothing was written"])
    listed = document["written"]
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise RenderOutError([f"--out {out}: {shape}; nothing was written"])
    for name in listed:
        parts = Path(name).parts
        # Only paths inside out: a hand-edited marker cannot point a delete elsewhere.
        if not name or Path(name).is_absolute() or ".." in parts or "." in name.split("/"):
            raise RenderOutError([f"--out {out}: {RENDER_MARKER} lists {name[:200]!r}"])
    return list(listed)


def _owned_files(out: Path) -> list[Path]:
    """The files an earlier render recorded in out's marker (refuses a directory without one)."""
    if not out.exists():
        return []
    if not out.is_dir():
        raise RenderOutError([f"--out {out}: not a directory"])
    marker = out / RENDER_MARKER
    if marker.is_symlink():
        _refuse_symlink(out, RENDER_MARKER)
    if not marker.is_file():
        if _is_unmarked_render(out):
            # Written before renders had a marker: the contract's own files and nothing else.
            found = []
            for folder, dirs, names in os.walk(out):
                for name in [*dirs, *names]:
                    path = Path(folder) / name
                    _refuse_symlink(out, str(path.relative_to(out)))
                    if name in names:
                        found.append(path)
            return sorted(found)
        if any(out.iterdir()):
            raise RenderOutError(
                [
                    f"--out {out}: not empty and not written by llm-infra render (no "
                    f"{RENDER_MARKER}); nothing was written: choose a new or empty directory"
                ]
            )
        return []
    owned = []
    for name in _marker_names(out, marker):
        _refuse_symlink(out, name)
        owned.append(out / name)
    return owned


def write(rendered: Rendered, out: Path) -> list[Path]:
    """Write the render contract files into out, replacing only what an earlier render wrote.

    out is a render's directory: new or empty, or holding the marker of an earlier render.
    Files that render did not write there are never deleted or overwritten.
    """
    files: dict[str, bytes] = {
        "resources.json": (json.dumps(rendered.resources, indent=2) + "\n").encode(),
        "outputs.json": (json.dumps(rendered.outputs, indent=2, sort_keys=True) + "\n").encode(),
    }
    if rendered.manifests:
        files["manifests.yaml"] = manifests_yaml(rendered.manifests).encode()
    for remote_path, content in rendered.files.items():
        files[str(Path("files") / remote_path.lstrip("/"))] = content
    for name, script in rendered.commands.items():
        files[str(Path("commands") / name)] = (
            script if script.endswith("\n") else script + "\n"
        ).encode()
    owned = _owned_files(out)
    owned_set = set(owned)
    for name in files:
        _refuse_symlink(out, name)
        target = out / name
        if target.exists() and target not in owned_set:
            raise RenderOutError(
                [f"--out {out}: {name} exists and no earlier render wrote it; nothing was written"]
            )
    for stale in owned:
        if stale.is_file():
            stale.unlink()
        parent = stale.parent
        # Folders the last render made and left empty now (files/opt/llm, commands).
        while parent != out and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_no_follow(target, content)
        written.append(target)
    marker = {"written": sorted(files)}
    _write_no_follow(out / RENDER_MARKER, (json.dumps(marker, indent=2) + "\n").encode())
    return written


def _write_no_follow(path: Path, content: bytes) -> None:
    """Write a file, refusing a symbolic link put there since the checks."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(content)
