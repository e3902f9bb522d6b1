"""Edits of a stack file's values for tests (set, delete or add one key), and the program
run on an edited stack under mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra import program
from infra.config import read_stack_file
from infra.render import Rendered, run_program
from tests.conftest import stack_document, write_stack

Edit = tuple[str, str, Any]  # (config key, dotted path inside it, new value or DELETE)


DELETE = object()


def edited(stack: str, edits: list[Edit]) -> dict[str, Any]:
    document = stack_document(stack)
    config = document["config"]
    for key, path, value in edits:
        full = f"llm-infra:{key}"
        if not path:
            config[full] = value
            continue
        node = config.setdefault(full, {})
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(parts[-1])
        else:
            node[parts[-1]] = value
    return document


SECRETS = {"llm-infra:apiKey": "sk-test-0123456789"}


def rendered(stack: str, edits: list[Edit], tmp_path: Path, secrets: bool = False) -> Rendered:
    path = write_stack(tmp_path / f"Pulumi.{stack}.yaml", edited(stack, edits))
    stack_file = read_stack_file(path)
    config, keys = dict(stack_file.config), list(stack_file.secret_keys)
    if secrets:
        config.update(SECRETS)
        keys += list(SECRETS)
    return run_program(program.main, config, keys, stack=stack)
