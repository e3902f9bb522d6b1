"""Building blocks of the stack config models: strict camelCase models, errors.

Every string that becomes a name, host, path, CIDR or URL passes one of the grammars of
`components.grammars` (the components' own inputs use the same ones) before anything is
rendered; builders downstream take the validated values as they are.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Self, get_args

import pulumi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from components.grammars import (
    QUANTITY_PATTERN,
    AbsolutePath,
    Architecture,
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
    RepoId,
    RepoPath,
    Revision,
    SiteAddress,
    SshHostKey,
    is_ip_address,
    quantity_value,
)
from components.images import parse_image
from components.model_store.inputs import GgufModelStoreArgs
from components.validation import error_messages
from infra.config.declared import declared

__all__ = [
    "AbsolutePath",
    "Architecture",
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

PLACEHOLDER_PREFIX = "<set: "
"""A value `llm-infra init` leaves for a person to fill: `<set: HOW>`; every command refuses it."""
_PLACEHOLDER = re.compile(r"^<set: ([ -=?-~]{1,200})>$")

SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


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
        # A stack file's `port: true` or `temperature: "1.0"` is a mistake, not a 1 or a 1.0: no
        # bool or string stands for a number (integers still stand for floats).
        strict=True,
    )


class NamespacePods(Strict):
    """Pods of one namespace, optionally narrowed by pod labels (what a NetworkPolicy admits)."""

    namespace: DnsLabel
    """Namespace of the pods."""
    pod_labels: dict[LabelKey, LabelValue] = {}
    """Labels the pods must carry; empty: every pod of the namespace."""


class SingleServer:
    """What every stack answers of its servers, for a stack of one server (its own).

    A fleet (`infra.config.fleet.FleetStack`) answers the same for each of its servers, so the
    code that walks a stack's servers never asks which kind of stack it has.
    """

    def server_stacks(self) -> list[Self]:
        """Each server as the single-server stack it amounts to: this stack."""
        return [self]

    def server_names(self) -> list[str | None]:
        """Each server's name in its records beside the lock (None: the stack's own records)."""
        return [None]

    def server_key(self, problem: str, index: int) -> str:
        """A problem of server `index` under the stack file's key: as it is, for one server."""
        return problem

    def model_key(self, index: int) -> str:
        """The stack file's key of server `index`'s model."""
        return "model"

    def lock_paths(self, stack_lock: Path) -> list[Path]:
        """Each server's lock file: the stack's."""
        return [stack_lock]


ModelSizeGib = Annotated[float, Field(ge=2**-20, le=2**20)]
"""A model's size in GiB before a lock records it: at least 1 KiB, at most 1 PiB (a size the
plan can count in bytes)."""


class RepoModelSettings(Strict):
    """A model in a Hugging Face repo: which revision and which files (exact paths or globs)."""

    repo: RepoId
    """Hugging Face repo, `owner/name`."""
    revision: Revision = declared(GgufModelStoreArgs, "revision")
    files: Annotated[list[RepoPath], Field(min_length=1)]
    """Files of the repo to fetch: exact paths or glob patterns (`llm-infra lock` resolves
    them); a GGUF model is one file or every shard of one split set, shard 1 first."""
    size_gib: ModelSizeGib | None = None
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
    parsed = [SHARD_NAME.match(n) for n in names]
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


def placeholder_problems(values: Any, key: str = "") -> list[str]:
    """One line per `<set: HOW>` placeholder left in a stack's values, naming its key and how
    to fill it."""
    if isinstance(values, Mapping):
        return [
            problem
            for name, value in values.items()
            for problem in placeholder_problems(value, f"{key}.{name}" if key else str(name))
        ]
    if isinstance(values, list):
        return [
            problem
            for index, value in enumerate(values)
            for problem in placeholder_problems(value, f"{key}[{index}]")
        ]
    if isinstance(values, str) and values.startswith(PLACEHOLDER_PREFIX):
        match = _PLACEHOLDER.match(values)
        how = match[1] if match else "see the comment above it"
        return [f"{key}: not set yet: {how} (replace the placeholder `llm-infra init` wrote)"]
    return []


UNION_TAG = "union:"
"""Prefix of the tags of a union whose member a discriminator picks (`server.runtime`: a name
or a mapping): pydantic puts the tag in an error's location, the stack file has no such key."""


def _key(loc: tuple[int | str, ...]) -> str:
    key = ""
    for part in loc:
        if isinstance(part, str) and part.startswith(UNION_TAG):
            continue
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def _shown(value: object) -> str:
    # A value as an error quotes it: repr (control characters visible), long ones cut short.
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(str(value))} characters)"


_UNIT_SPELLINGS = {
    "k": "k", "kb": "k", "kib": "Ki", "ki": "Ki", "m": "M", "mb": "M", "mib": "Mi", "mi": "Mi",
    "g": "G", "gb": "G", "gib": "Gi", "gi": "Gi", "t": "T", "tb": "T", "tib": "Ti", "ti": "Ti",
}  # fmt: skip


def quantity_hint(value: object) -> str:
    """What to write instead of a malformed Kubernetes quantity (`20GB` → `write 20Gi`)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", str(value).strip())
    if match:
        number, unit = match.groups()
        fixed = _UNIT_SPELLINGS.get(unit.lower())
        if fixed is not None:
            # People who write GB mean GiB here: memory sizes are binary (20Gi, not 20G).
            binary = fixed if fixed.endswith("i") or fixed == "k" else fixed + "i"
            return f"write {number}{binary}"
    return "write a number with a binary unit, e.g. 20Gi or 512Mi"


def _allowed_keys(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model accepts at loc's parent (its fields' aliases), or [] when unknown."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return []
        field = next((f for n, f in fields.items() if (f.alias or n) == part), None)
        if field is None:
            return []
        candidates = [field.annotation, *get_args(field.annotation)]
        candidates += [a for c in list(candidates) for a in get_args(c)]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    fields = getattr(current, "model_fields", None)
    return [f.alias or n for n, f in fields.items()] if fields else []


def validation_problems(error: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """pydantic's errors as `key: what is wrong` lines, in the components' wording
    (`components.validation.error_messages`), with an unknown key's nearest allowed one
    (`did you mean contextSize?`) and what to write for a malformed quantity."""
    problems = []
    for (loc, message), item in zip(error_messages(error), error.errors(), strict=True):
        pattern = (item.get("ctx") or {}).get("pattern")
        if item["type"] == "extra_forbidden":
            close = difflib.get_close_matches(
                str(item["loc"][-1]), _allowed_keys(model, item["loc"]), n=1, cutoff=0.6
            )
            if close:
                message += f" (did you mean {close[0]}?)"
        elif item["type"] == "string_pattern_mismatch" and pattern == QUANTITY_PATTERN:
            shown = _shown(item["input"])
            message = f"{shown} is not a Kubernetes quantity: {quantity_hint(item['input'])}"
        problems.append(f"{_key(loc)}: {message}")
    return problems


def image_problems(
    key: str, image: str, allowed: bool, example: str, flag: str | None = None
) -> list[str]:
    """A floating image tag, unless the stack explicitly allows one (`flag`: the key that
    does; default: `allowFloatingImage` beside `key`)."""
    if allowed or parse_image(image).pinned:
        return []
    flag = flag or key.rsplit(".", 1)[0] + ".allowFloatingImage"
    return [f"{key}: {image!r} is a floating tag (pin {example}; or set {flag}: true)"]


def stack_placement_problems(selectors: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
    """The node rule (components/k8s/placement.py) over a stack's `(KEY.nodeSelector, selector)`
    pairs, as the stack file's lines."""
    from components.k8s.placement import placement_problems

    pods = [(key.removesuffix(".nodeSelector"), selector) for key, selector in selectors]
    return [f"{selectors[index][0]}: {message}" for index, message in placement_problems(pods)]


def _known_device(name: str) -> str:
    from infra.devices import DEVICES

    if name not in DEVICES:
        raise ValueError(f"not in the plan's device table (one of: {', '.join(DEVICES)})")
    return name


DeviceName = Annotated[str, AfterValidator(_known_device)]


class DeviceSettings(Strict):
    """The device the plan's speed estimate reads: a table entry (`infra.devices`), and
    figures of this box that differ from the published ones."""

    name: DeviceName
    """The device table's entry: radeon-8060s, mi300x, h100-sxm, h200, or a CPU host
    (ryzen-ai-max-395, epyc-9004, xeon-4th-gen, epyc-7003)."""
    bandwidth_gbps: Annotated[float, Field(gt=0)] | None = None
    """Memory bandwidth (GB/s) instead of the entry's published peak (a unified memory: the
    host's too)."""
    tflops: Annotated[float, Field(gt=0)] | None = None
    """Compute (TFLOPS, FP16 matrix) instead of the entry's published peak."""
    host_bandwidth_gbps: Annotated[float, Field(gt=0)] | None = None
    """The host RAM's bandwidth (GB/s), for layers left on the CPU."""
