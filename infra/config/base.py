"""Building blocks of the stack config models: strict camelCase models, errors.

Every string that becomes a name, host, path, CIDR or URL passes one of the grammars of
`components.grammars` (the components' own inputs use the same ones) before anything is
rendered; builders downstream take the validated values as they are.
"""

from __future__ import annotations

import re
from typing import Annotated

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from components.grammars import (
    AbsolutePath,
    Cidr,
    DnsLabel,
    Email,
    HttpUrl,
    Identifier,
    ImageReference,
    IpAddress,
    KubeContext,
    LabelKey,
    LabelValue,
    ModelName,
    Port,
    Quantity,
    RepoPath,
    SiteAddress,
    SshHostKey,
    is_ip_address,
    quantity_value,
)
from components.k8s.images import parse_image
from components.validation import error_messages

__all__ = [
    "AbsolutePath",
    "Cidr",
    "DnsLabel",
    "Email",
    "HttpUrl",
    "Identifier",
    "ImageReference",
    "IpAddress",
    "KubeContext",
    "LabelKey",
    "LabelValue",
    "ModelName",
    "Port",
    "Quantity",
    "RepoPath",
    "SiteAddress",
    "SshHostKey",
    "is_ip_address",
    "quantity_value",
]

NAMESPACE = "llm-infra"
SECRET_KEYS = ("hfToken", "apiKey", "sshPrivateKey")
# Keys that locate things rather than describe the stack.
LOCATION_KEYS = ("lockFile",)
SECRET_PLACEHOLDER = "[secret]"

_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class ConfigError(pulumi.RunError):
    """Invalid stack configuration: one problem per line, each naming its key."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid stack configuration:\n" + "\n".join(problems))
        self.problems = problems


class Strict(BaseModel):
    """Base of every config model: camelCase keys, unknown keys rejected, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        # 1e400 is inf and nan compares false with every bound: neither is a size or a speed.
        allow_inf_nan=False,
    )


class RepoModelSettings(Strict):
    """A model in a Hugging Face repo: which revision and which files (exact paths or globs)."""

    repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*/[A-Za-z0-9][-A-Za-z0-9_.]*$")]
    revision: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")] = "main"
    files: Annotated[list[RepoPath], Field(min_length=1)]
    size_gib: Annotated[float, Field(gt=0)] | None = None
    """Weight size for the memory plan before a lock records the files' sizes."""

    @property
    def file_names(self) -> list[str]:
        """File names on the volume (repo folders dropped)."""
        return [path.rsplit("/", 1)[-1] for path in self.files]


def is_pattern(path: str) -> bool:
    """True when a `model.files` entry is a glob pattern (resolved by `llm-infra lock`)."""
    return any(char in path for char in "*?[")


def shard_set_problems(names: list[str], key: str) -> list[str]:
    """Problems of a GGUF file set: one file, or every shard of one split set, shard 1 first."""
    parsed = [_SHARD.match(n) for n in names]
    if len(names) == 1 and parsed[0] is None:
        return [] if names[0].endswith(".gguf") else [f"{key}[0]: {names[0]!r} is not a .gguf"]
    problems = []
    for i, (name, match) in enumerate(zip(names, parsed, strict=True)):
        if match is None:
            problems.append(
                f"{key}[{i}]: {name!r} is not a split shard <prefix>-NNNNN-of-MMMMM.gguf"
            )
    if problems:
        return problems
    shards = [(m["prefix"], int(m["no"]), int(m["count"])) for m in parsed if m is not None]
    if len({(p, c) for p, _, c in shards}) != 1:
        return [f"{key}: the shards must share one prefix and one shard count"]
    count = shards[0][2]
    numbers = [no for _, no, _ in shards]
    missing = sorted(set(range(1, count + 1)) - set(numbers))
    if missing:
        absent = ", ".join(f"-{n:05d}-of-{count:05d}" for n in missing)
        problems.append(f"{key}: incomplete shard set, {absent} absent")
    if len(set(numbers)) != len(numbers) or (len(numbers) != count and not missing):
        problems.append(f"{key}: expected each of the {count} shards exactly once")
    if numbers[0] != 1:
        problems.append(f"{key}[0]: the first shard (-00001-of-...) must come first (it is -m)")
    if len(set(names)) != len(names):
        problems.append(f"{key}: two files have the same name")
    return problems


def _key(loc: tuple[int | str, ...]) -> str:
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def validation_problems(error: ValidationError) -> list[str]:
    """pydantic's errors as `key: what is wrong` lines."""
    return [f"{_key(loc)}: {message}" for loc, message in error_messages(error)]


def image_problems(key: str, image: str, allowed: bool, example: str) -> list[str]:
    """A floating image tag, unless the stack explicitly allows one."""
    if allowed or parse_image(image).pinned:
        return []
    flag = key.rsplit(".", 1)[0] + ".allowFloatingImage"
    return [f"{key}: {image!r} is a floating tag (pin {example}; or set {flag}: true)"]
