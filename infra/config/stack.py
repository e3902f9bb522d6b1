"""A stack: the one reader of a stack's config (a stack file, or Pulumi's), and its validation.

A stack file (`stacks/Pulumi.STACK.yaml`) sets keys in the `llm-infra` namespace; `pulumi up`
hands the same keys to the program as Pulumi config. Both reach `parse_stack` through
`namespace_values`, so the CLI, the render and the program see one and the same `StackConfig`.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pulumi
import yaml
from pydantic import ValidationError

from infra.config.base import (
    LOCATION_KEYS,
    NAMESPACE,
    SECRET_KEYS,
    SECRET_PLACEHOLDER,
    ConfigError,
    placeholder_problems,
    validation_problems,
)
from infra.config.docker_host import DockerHostStack
from infra.config.docker_host_checks import docker_host_checks
from infra.config.fleet import FleetStack, fleet_checks
from infra.config.kubernetes import KubernetesStack
from infra.config.kubernetes_checks import cross_checks
from infra.config.limits import MAX_STACK_FILE_BYTES, load_yaml, read_limited
from infra.config.secrets import (
    StackSecrets,
    missing_secrets,
    plaintext_secret_problem,
    secret_output,
    secret_problems,
    token_transport_problems,
)

StackConfig = KubernetesStack | FleetStack | DockerHostStack
"""A validated stack; `infra.targets.registry.target_of` says what its target does with it."""

ServerStack = KubernetesStack | DockerHostStack
"""One server as a stack (`StackConfig.server_stacks()`: a fleet's each, else the stack)."""

STACK_MODELS: dict[str, type[KubernetesStack] | type[FleetStack] | type[DockerHostStack]] = {
    model.kind: model for model in get_args(StackConfig)
}
"""The model of each kind of stack (`StackConfig`'s), keyed as the table of targets is."""

TARGETS: tuple[str, ...] = tuple(
    dict.fromkeys(
        value
        for model in STACK_MODELS.values()
        for value in get_args(model.model_fields["target"].annotation)
    )
)
"""What a stack file's `target:` may say: the models' `target` literals (`kubernetes` with
`servers:` is a fleet)."""


def parse_stack(values: Mapping[str, Any]) -> StackConfig:
    """Validate the `llm-infra` config values (keys without namespace) into a StackConfig."""
    placeholders = placeholder_problems(values)
    if placeholders:
        # What the keys' own rules would say of `<set: ...>` adds nothing: fill these first.
        raise ConfigError(placeholders)
    target = values.get("target")
    if not isinstance(target, str) or target not in TARGETS:
        allowed = ", ".join(TARGETS)
        got = "missing" if target is None else f"{target!r} is not a known target"
        raise ConfigError([f"target: {got} (allowed: {allowed})"])
    kind = target
    if target == "kubernetes" and "servers" in values:
        single = [key for key in ("server", "model", "store") if key in values]
        if single:
            raise ConfigError(
                [
                    f"{key}: set inside each entry of servers: (a stack has either servers: or "
                    "one server:, model: and store:)"
                    for key in single
                ]
            )
        kind = "fleet"
    model = STACK_MODELS[kind]
    try:
        stack = model.model_validate(dict(values))
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, model)) from None
    if isinstance(stack, FleetStack):
        problems = fleet_checks(stack)
    elif isinstance(stack, KubernetesStack):
        problems = cross_checks(stack)
    else:
        problems = docker_host_checks(stack, project_root())
    if problems:
        raise ConfigError(problems)
    return stack


def namespace_values(config: Mapping[str, object]) -> dict[str, Any]:
    """The stack's keys from Pulumi config (`llm-infra:key` → text), namespace stripped.

    Objects, lists, numbers and booleans arrive as JSON text and are decoded; secrets and the
    keys that locate files (`lockFile`) are left out: they are not part of the stack model.
    """
    values: dict[str, Any] = {}
    for full_key, value in config.items():
        namespace, _, key = full_key.partition(":")
        if namespace != NAMESPACE or key in SECRET_KEYS or key in LOCATION_KEYS:
            continue
        try:
            values[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            values[key] = value
    return values


def _pulumi_config() -> dict[str, str]:
    # Every value is read through pulumi.Config (which also honours PULUMI_CONFIG_<KEY>). Only
    # the key names come from the runtime's maps: the SDK has no public way to list them, and
    # an unknown key must be an error rather than silently ignored.
    keys = {*pulumi.runtime.get_config_env(), *pulumi.runtime.config.CONFIG.get()}
    config: dict[str, str] = {}
    for full_key in sorted(k for k in keys if ":" in k):
        namespace, _, key = full_key.partition(":")
        value = pulumi.Config(namespace).get(key)
        if value is not None:
            config[full_key] = value
    return config


@dataclass(frozen=True)
class StackFile:
    """A stack file read as Pulumi would hand it to the program."""

    name: str
    """The stack name (`strix-halo` for `stacks/Pulumi.strix-halo.yaml`)."""
    path: Path
    config: dict[str, str]
    """Pulumi config as the engine holds it: `namespace:key` → text (objects as JSON)."""
    secret_keys: list[str]
    """Keys set as encrypted secrets; their values stand as `[secret]` (render has no key)."""

    @property
    def lock_path(self) -> Path:
        """The stack's lock file (it may not exist yet)."""
        return lock_path_for(self.path)

    def expectations_path(self, server: str | None = None) -> Path:
        """The stack's recorded verify expectations, or one fleet server's (may not exist yet)."""
        return expectations_path_for(self.lock_path, server)

    def tune_path(self, server: str | None = None) -> Path:
        """The stack's tune record, or one fleet server's (may not exist yet)."""
        return tune_path_for(self.lock_path, server)

    def values(self) -> dict[str, Any]:
        """The stack's keys, namespace stripped (what `parse_stack` validates)."""
        return namespace_values(self.config)

    def stack(self) -> StackConfig:
        """The validated stack (ConfigError on problems)."""
        return parse_stack(self.values())


def names_a_file(stack: str) -> bool:
    """True when a STACK argument is a path to a stack file rather than a stack name."""
    path = Path(stack)
    return path.suffix in (".yaml", ".yml") or path.exists()


def stack_file_in(root: Path, name: str) -> Path:
    """Where the stack named `name` lives in the checkout at root: `stacks/Pulumi.NAME.yaml`."""
    return root / "stacks" / f"Pulumi.{name}.yaml"


def resolve_stack(stack: str) -> tuple[str, Path]:
    """A stack name (`stacks/Pulumi.NAME.yaml`) or a path to a stack file → (name, path)."""
    path = Path(stack)
    if names_a_file(stack):
        return path.name.removeprefix("Pulumi.").rsplit(".", 1)[0], path
    # Outside a checkout a name means nothing: not the installed tree's stacks (the error says
    # how to point at a checkout).
    root = checkout_root() or Path.cwd().resolve()
    return stack, stack_file_in(root, stack)


def read_stack_file(stack: str | Path) -> StackFile:
    """Read a stack file (by stack name or path); ConfigError when it is missing or malformed."""
    name, path = resolve_stack(str(stack))
    if not path.is_file():
        raise ConfigError([missing_stack_problem(str(stack), path)])
    try:
        text = read_limited(path, MAX_STACK_FILE_BYTES, "stack file")
        document = load_yaml(text, path) or {}
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([yaml_syntax_problem(path, exc)]) from None
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError([f"{path}: not a readable YAML file ({exc})"]) from None
    entries = document.get("config") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        raise ConfigError([f"{path}: no `config:` mapping (a Pulumi stack file has one)"])
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in entries.items():
        full_key = key if ":" in str(key) else f"{NAMESPACE}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            # Encrypted with the stack's key, which render does not have: a secret is present.
            config[full_key] = SECRET_PLACEHOLDER
            secret_keys.append(full_key)
        elif full_key.partition(":")[2] in SECRET_KEYS and full_key.startswith(f"{NAMESPACE}:"):
            raise ConfigError([plaintext_secret_problem(full_key.partition(":")[2], str(path))])
        elif isinstance(value, str):
            config[full_key] = value
        else:
            config[full_key] = json.dumps(value)
    config.setdefault(f"{NAMESPACE}:lockFile", str(lock_path_for(path)))
    return StackFile(name=name, path=path, config=config, secret_keys=secret_keys)


PROJECT_ENV = "LLM_INFRA_PROJECT"
"""Points the commands at a checkout from outside it (a stack name is looked up there)."""


def yaml_syntax_problem(path: Path, exc: yaml.MarkedYAMLError) -> str:
    """`FILE:LINE:COL: what is wrong`, as compilers and editors print it (1-based)."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    what = "; ".join(part for part in (exc.context, exc.problem) if part)
    return f"{where}: YAML syntax: {what or 'not valid YAML'}"


def stack_names(root: Path) -> list[str]:
    """The stacks of a checkout: `stacks/Pulumi.NAME.yaml`."""
    found = (root / "stacks").glob("Pulumi.*.yaml")
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in found)


def missing_stack_problem(stack: str, path: Path) -> str:
    """Why a stack was not found: the file looked for, the closest stack name, the stacks there,
    and, outside a checkout, how to point at one."""
    problem = f"no stack file {path} (stacks are stacks/Pulumi.NAME.yaml)"
    if names_a_file(stack):
        return problem
    root = path.parent.parent
    names = stack_names(root)
    close = difflib.get_close_matches(stack, names, n=1)
    if close:
        problem += f"; did you mean {close[0]}?"
    problem += f"; the stacks in {root}: {', '.join(names)}" if names else ""
    if checkout_root() is None:
        problem += (
            f"; you are outside an llm-infra checkout: cd into one, set {PROJECT_ENV}=DIR, "
            "or give the stack file's path"
        )
    return problem


def checkout_root(start: Path | None = None) -> Path | None:
    """The checkout the user points at: ${PROJECT_ENV}, else the nearest directory upward
    with this project's Pulumi.yaml; None outside one."""
    pointed = os.environ.get(PROJECT_ENV)
    if pointed:
        return Path(pointed).resolve()
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "Pulumi.yaml"
        if candidate.is_file() and "name: llm-infra" in candidate.read_text():
            return directory
    return None


def project_root(start: Path | None = None) -> Path:
    """The checkout (`checkout_root`), else the installed tree."""
    return checkout_root(start) or Path(__file__).resolve().parents[2]


def lock_path_for(stack_file: Path) -> Path:
    """Where a stack's lock lives: beside its stack file, `STACK.lock.json`."""
    name = stack_file.name.removeprefix("Pulumi.").rsplit(".", 1)[0]
    return stack_file.with_name(f"{name}.lock.json")


def beside_lock(lock_path: Path, kind: str, server: str | None = None) -> Path:
    """A stack's reviewed record of one kind beside its lock: `STACK.KIND.json`; that of one
    server of a fleet (by its name, a DNS label) `STACK.SERVER.KIND.json`."""
    stem = lock_path.name.removesuffix(".lock.json")
    return lock_path.with_name(f"{stem}.{server}.{kind}.json" if server else f"{stem}.{kind}.json")


def expectations_path_for(lock_path: Path, server: str | None = None) -> Path:
    """Where a stack's verify expectations live: beside its lock, `STACK.verify.json`; those of
    one server of a fleet (by its name, a DNS label) `STACK.SERVER.verify.json`."""
    return beside_lock(lock_path, "verify", server)


def tune_path_for(lock_path: Path, server: str | None = None) -> Path:
    """Where `llm-infra tune` pins a stack's runtime: beside its lock, `STACK.tune.json`; one
    fleet server's `STACK.SERVER.tune.json`."""
    return beside_lock(lock_path, "tune", server)


def load_stack_config() -> tuple[StackConfig, Path, StackSecrets]:
    """Read and validate the stack's config; secrets come back as Outputs, never in the model.

    Returns the stack, the path of its lock file (which may not exist yet) and its secrets.
    """
    config = pulumi.Config(NAMESPACE)
    raw = _pulumi_config()
    stack = parse_stack(namespace_values(raw))
    values = {key: raw.get(f"{NAMESPACE}:{key}") for key in SECRET_KEYS}
    problems = [p for key, value in values.items() for p in secret_problems(key, value)]
    problems += [
        plaintext_secret_problem(key, "the stack's config")
        for key, value in values.items()
        if value is not None and not pulumi.runtime.config.is_config_secret(f"{NAMESPACE}:{key}")
    ]
    if problems:
        raise ConfigError(problems)
    secrets = StackSecrets(
        hf_token=secret_output(values["hfToken"]),
        api_key=secret_output(values["apiKey"]),
        ssh_private_key=secret_output(values["sshPrivateKey"], keep_final_newline=True),
    )
    present = {
        key
        for key, value in (
            ("hfToken", secrets.hf_token),
            ("apiKey", secrets.api_key),
            ("sshPrivateKey", secrets.ssh_private_key),
        )
        if value is not None
    }
    always, for_up = missing_secrets(stack, present)
    always += token_transport_problems(stack, "hfToken" in present)
    if always or (for_up and not pulumi.runtime.is_dry_run()):
        raise ConfigError(always + for_up)
    if for_up:
        # A preview (and a render) shows the stack with a placeholder; `pulumi up` refuses.
        placeholder = pulumi.Output.secret(SECRET_PLACEHOLDER)
        missing = {line.split(":", 1)[0] for line in for_up}
        secrets = StackSecrets(
            hf_token=secrets.hf_token,
            api_key=placeholder if "apiKey" in missing else secrets.api_key,
            ssh_private_key=placeholder if "sshPrivateKey" in missing else secrets.ssh_private_key,
        )
        for line in for_up:
            pulumi.log.warn(f"{line} (preview only: pulumi up refuses)")
    lock_file = config.get("lockFile")
    lock_path = (
        Path(lock_file)
        if lock_file
        else project_root() / "stacks" / f"{pulumi.get_stack()}.lock.json"
    )
    return stack, lock_path, secrets
