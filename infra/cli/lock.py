"""`llm-infra lock STACK`: resolve the stack's model to one commit, its files, sizes and sha256."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError

from components.payloads.fetcher import DEFAULT_ENDPOINT
from infra.cli.common import Subparsers, print_json, report_config_error
from infra.config import ConfigError, RepoModelSettings, StackConfig, project_root, read_stack_file
from infra.config.base import validation_problems
from infra.config.kubernetes import HubSettings
from infra.config.stack import ServerStack, StackFile
from infra.lock_source import speculative_draft


def add_parser(sub: Subparsers) -> None:
    """Register `lock`."""
    parser = sub.add_parser("lock", stack=True, output=True)
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        default=None,
        help="the hub (default: the stack's store.hfEndpoint, else $HF_ENDPOINT, else "
        f"{DEFAULT_ENDPOINT}; a token comes only from $HF_TOKEN or the stack's hfToken secret)",
    )
    parser.add_argument(
        "--allow-token-over-http",
        action="store_true",
        help="send the HF token to a plain-http endpoint (refused unless stated here or by the "
        "stack's store.allowTokenOverHttp)",
    )
    parser.set_defaults(run=run)


def hf_token(stack: str) -> str | None:
    """The HF token from the environment, else from the stack's Pulumi secret config."""
    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    pulumi_cli = shutil.which("pulumi")
    if pulumi_cli is None:
        return None
    result = subprocess.run(
        [pulumi_cli, "config", "get", "hfToken", "--stack", stack],
        capture_output=True, text=True, check=False, cwd=project_root(),
    )  # fmt: skip
    return result.stdout.strip() or None if result.returncode == 0 else None


def run(args: argparse.Namespace) -> int:
    """Resolve and write the lock beside the stack file."""
    from infra import lock

    try:
        stack_file = read_stack_file(args.stack)
        targets, hub = lock_request(stack_file)
        endpoint, allow_http = hub_endpoint(hub, args.endpoint, args.allow_token_over_http)
        token = hf_token(stack_file.name)

        def resolve(model: RepoModelSettings) -> lock.ModelLock:
            return lock.resolve_lock(
                model, token=token, endpoint=endpoint, allow_token_over_http=allow_http
            )

        resolved = {}
        for path, (model, draft) in targets.items():
            locked = resolve(model)
            if draft is not None:
                try:
                    pinned = resolve(draft)
                except ConfigError as exc:
                    raise type(exc)(
                        [p.replace("model.", "server.speculative.draft.", 1) for p in exc.problems]
                    ) from None
                locked = locked.model_copy(update={"draft": pinned})
            resolved[path] = locked
    except lock.HubUnreachable as exc:
        report_config_error(exc, f"cannot lock {args.stack}")
        return EXIT_NETWORK
    except ConfigError as exc:
        return report_config_error(exc, f"cannot lock {args.stack}")
    written: list[dict[str, Any]] = []
    for target, locked in resolved.items():
        previous = lock.read_lock(target) if target.is_file() else None
        lock.write_lock(target, locked)
        change = "unchanged" if previous == locked else ("updated" if previous else "created")
        written.append(
            {
                "path": str(target),
                "repo": locked.repo,
                "revision": locked.revision,
                "files": len(locked.files),
                "bytes": locked.total_bytes,
                "change": change,
                **(
                    {"draft": {"repo": locked.draft.repo, "revision": locked.draft.revision,
                               "files": len(locked.draft.files),
                               "bytes": locked.draft.total_bytes}}
                    if locked.draft is not None
                    else {}
                ),
            }
        )  # fmt: skip
    if args.output == "json":
        print_json({"locks": written})
        return 0
    for entry in written:
        draft = entry.get("draft")
        with_draft = (
            f" with the draft {draft['repo']}@{draft['revision']} ({draft['files']} files, "
            f"{draft['bytes'] / 2**30:.2f} GiB)"
            if draft
            else ""
        )
        print(
            f"locked {entry['repo']}@{entry['revision']} ({entry['files']} files, "
            f"{entry['bytes'] / 2**30:.2f} GiB){with_draft} → {entry['path']} ({entry['change']})"
        )
    return 0


EXIT_NETWORK = 3
"""The hub could not be reached (or failed on its side): try again, or another endpoint."""


class _LockHub(HubSettings):
    """The store's hub keys, the rest of `store:` left to render."""

    model_config = ConfigDict(extra="ignore")


LockTargets = dict[Path, tuple[RepoModelSettings, RepoModelSettings | None]]
"""Each lock file, the model it pins and the speculative draft it pins with it."""


def lock_request(stack_file: StackFile) -> tuple[LockTargets, HubSettings | None]:
    """What `lock` needs of a stack: each model to pin, and its store's hub settings.

    A single-server stack needs only `model:` (repo, revision, files) and, where set,
    `store.hfEndpoint` and `store.allowTokenOverHttp`: the other keys (sizes, the server, the
    plan's structure) are render's to check, so a stack being written can be locked first. A
    fleet is read whole (its lock files are named after its servers).
    """
    values = stack_file.values()
    if "servers" in values:
        stack = stack_file.stack()
        return lock_targets(stack, stack_file.lock_path), getattr(stack, "store", None)
    model = values.get("model")
    if not isinstance(model, dict):
        raise ConfigError(["model: is required (repo, revision and files)"])
    wanted = {key: model[key] for key in ("repo", "revision", "files") if key in model}
    store = values.get("store")
    problems: list[str] = []
    settings = hub = None
    try:
        settings = RepoModelSettings.model_validate(wanted)
    except ValidationError as exc:
        problems += [f"model.{line}" for line in validation_problems(exc, RepoModelSettings)]
    try:
        hub = _LockHub.model_validate(store if isinstance(store, dict) else {})
    except ValidationError as exc:
        problems += [f"store.{line}" for line in validation_problems(exc, _LockHub)]
    draft = None
    server = values.get("server")
    spec = server.get("speculative") if isinstance(server, dict) else None
    if isinstance(spec, dict) and isinstance(spec.get("draft"), dict):
        wanted = {
            key: spec["draft"][key] for key in ("repo", "revision", "files") if key in spec["draft"]
        }
        try:
            draft = RepoModelSettings.model_validate(wanted)
        except ValidationError as exc:
            problems += [
                f"server.speculative.draft.{line}"
                for line in validation_problems(exc, RepoModelSettings)
            ]
    if problems or settings is None:
        raise ConfigError(problems)
    return {stack_file.lock_path: (settings, draft)}, hub


def hub_endpoint(
    hub: HubSettings | None, option: str | None, allow_option: bool
) -> tuple[str | None, bool]:
    """The one endpoint setting: `--endpoint`, else the stack's store.hfEndpoint (which the
    fetch Job uses too), else $HF_ENDPOINT; and whether a token may go to it over plain http."""
    configured = str(hub.hf_endpoint).rstrip("/") if hub and hub.hf_endpoint else None
    endpoint = option or configured or os.environ.get("HF_ENDPOINT") or None
    allowed = allow_option or bool(hub and endpoint == configured and hub.allow_token_over_http)
    return endpoint, allowed


def lock_targets(stack: StackConfig, lock_path: Path) -> LockTargets:
    """Each lock file of a stack, the model it pins and its draft (a fleet: one per distinct
    model)."""
    servers: Sequence[ServerStack] = stack.server_stacks()
    paths = stack.lock_paths(lock_path)
    return {
        path: (server.model, speculative_draft(server))
        for path, server in zip(paths, servers, strict=True)
    }
