"""The tiny GGUF repo of the hub emulator, a stack file pointed at it, and `llm-infra` run
against it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ROOT, stack_document, write_stack
from tests.support.cli import run_cli
from tests.support.hub_emulator import Hub, running_hub
from tests.support.tiny_gguf import write_tiny_split_model

REPO = "unsloth/Tiny-GGUF"


NAMES = [f"Tiny-UD-IQ1_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


@contextmanager
def tiny_repo_hub(work: Path) -> Iterator[Hub]:
    """The emulator serving REPO: three tiny shards, another quant and small git files."""
    shards = write_tiny_split_model(work, "Tiny-UD-IQ1_M", shards=3)
    files = {f"UD-IQ1_M/{p.name}": p.read_bytes() for p in shards}
    files["UD-Q2_K/Tiny-UD-Q2_K.gguf"] = b"q" * 4000
    files["README.md"] = b"# tiny\n"
    # Small git files (no LFS sha256), one of them twice by name in two folders.
    files["config.json"] = b'{"chat_template": "{{ messages }}"}'
    files["inference/config.json"] = b'{"other": true}'
    with running_hub(Hub(repos={REPO: files})) as served:
        yield served


def stack_file(
    tmp_path: Path, repo: str = REPO, files: str | list[str] = "UD-IQ1_M/*", rev: str = "main"
) -> Path:
    """The strix-halo stack pointed at the tiny 2-layer llama model of the emulator."""
    document = stack_document("strix-halo")
    config = document["config"]
    model = config["llm-infra:model"]
    patterns = [files] if isinstance(files, str) else files
    model.update(repo=repo, revision=rev, files=patterns, architecture="llama", layers=2)
    model.pop("metadata")
    config["llm-infra:server"]["gpuLayers"] = 3
    return write_stack(tmp_path / "Pulumi.tiny.yaml", document)


def cli(hub: Hub | None, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """`llm-infra ARGS` in this process with HF_ENDPOINT at the hub (unset without one); the
    commands read HF_ENDPOINT and HF_TOKEN when they run and hand them to huggingface_hub."""
    unset = ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    if hub is not None:
        env["HF_ENDPOINT"] = hub.url
    env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    if token:
        env["HF_TOKEN"] = token
    return run_cli(list(args), env=env, cwd=ROOT)
