"""Building blocks of the stack config models: strict camelCase models, grammars, errors.

Every string that becomes a name, host, path, CIDR or URL passes one of the grammars here
before anything is rendered; builders downstream take the validated values as they are.
"""

from __future__ import annotations

import difflib
import ipaddress
import posixpath
import re
import urllib.parse
from typing import Annotated, Any, get_args

import pulumi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from components.images import parse_image

NAMESPACE = "llm-infra"
SECRET_KEYS = ("hfToken", "apiKey", "sshPrivateKey")
# Keys that locate things rather than describe the stack.
LOCATION_KEYS = ("lockFile",)
SECRET_PLACEHOLDER = "[secret]"

Port = Annotated[int, Field(ge=1, le=65535)]
DnsLabel = Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")]
_QUANTITY = re.compile(r"^(?P<num>[0-9]+(\.[0-9]+)?)(?P<unit>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_UNITS = {
    None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
Quantity = Annotated[str, Field(pattern=_QUANTITY.pattern)]
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def quantity_value(quantity: str) -> float:
    """A Kubernetes quantity as a number (cores or bytes)."""
    match = _QUANTITY.match(quantity)
    if match is None:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity")
    return float(match["num"]) * _UNITS[match["unit"]]


class ConfigError(pulumi.RunError):
    """Invalid stack configuration: one problem per line, each naming its key."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid stack configuration:\n" + "\n".join(problems))
        self.problems = problems


def _repo_path(value: str) -> str:
    if len(value) > 1024 or any(len(part) > 255 for part in value.split("/")):
        raise ValueError("is too long for a path (1024 characters, 255 per name)")
    if not re.fullmatch(r"[A-Za-z0-9._*?\[\]+=@-]+(/[A-Za-z0-9._*?\[\]+=@-]+)*", value):
        raise ValueError("is not a repo path (letters, digits, ._-+=@ and glob characters, /)")
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError("is not a repo path (no . or .. parts)")
    return value


RepoPath = Annotated[str, AfterValidator(_repo_path)]
"""A path (or glob) inside a Hugging Face repo: relative, no `..`, no spaces or quotes."""
ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/+-]{0,127}$")]
"""A model id clients send (`deepseek-v4-flash-0731`, `org/model:tag`): no spaces or quotes."""
Identifier = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_]{0,63}$")]
"""A lowercase identifier such as a parser or dtype name (`deepseek_v4`, `fp8`)."""
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LabelKey = Annotated[
    str,
    Field(
        pattern=rf"^([a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?)*/)?{_LABEL_NAME}$"
    ),
]
"""A Kubernetes label key (`kubernetes.io/hostname`, `gpu`)."""
LabelValue = Annotated[str, Field(pattern=rf"^({_LABEL_NAME})?$")]
"""A Kubernetes label value (63 characters at most)."""
KubeContext = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:/-]{0,252}$")]
"""A kubeconfig context name."""


def _http_url(value: str) -> str:
    if not re.fullmatch(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?", value):
        raise ValueError(
            "is not an http(s) URL of a host, an optional port and a path (no credentials, "
            "query or spaces)"
        )
    try:
        parsed = urllib.parse.urlsplit(value)
        port = parsed.port
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc})") from None
    host = parsed.hostname or ""
    if not (_DNS_NAME.match(host) or is_ip_address(host) or host == "localhost"):
        raise ValueError(f"names no valid host ({host!r})")
    if port is not None and not 1 <= port <= 65535:
        raise ValueError("has a port outside 1-65535")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
"""An http(s) endpoint such as a hub mirror: `https://host[:port][/path]`, nothing else."""


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
    """pydantic's errors as `key: what is wrong` lines: an unknown key with the nearest allowed
    one (`did you mean contextSize?`), a malformed quantity with what to write instead."""
    problems = []
    for item in error.errors():
        message = item["msg"]
        pattern = (item.get("ctx") or {}).get("pattern")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
            close = difflib.get_close_matches(
                str(item["loc"][-1]), _allowed_keys(model, item["loc"]), n=1, cutoff=0.6
            )
            if close:
                message += f" (did you mean {close[0]}?)"
        elif item["type"] == "string_pattern_mismatch" and pattern == _QUANTITY.pattern:
            shown = _shown(item["input"])
            message = f"{shown} is not a Kubernetes quantity: {quantity_hint(item['input'])}"
        elif item["type"] == "missing":
            message = "is required"
        elif item["type"] == "value_error":
            # Our grammars word their messages to follow the value: `'x' is not a network`.
            message = f"{_shown(item['input'])} {message.removeprefix('Value error, ')}"
        elif "input" in item and not isinstance(item["input"], dict | list):
            message = f"{_shown(item['input'])}: {message}"
        problems.append(f"{_key(item['loc'])}: {message}")
    return problems


def _cidr(value: str) -> str:
    # Digits, hex, dots, colons and one slash: ipaddress alone admits IPv6 zone ids (`%...`).
    if not re.fullmatch(r"[0-9A-Fa-f.:]+/[0-9]{1,3}", value):
        raise ValueError("is not a network address/prefix such as 10.0.0.0/8 or fd00::/8")
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"is not a network ({exc})") from None


Cidr = Annotated[str, AfterValidator(_cidr)]
"""A network in CIDR notation, normalised (`10.0.0.0/8`, `fd00::/8`); host bits must be zero."""


_DNS_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")


def is_ip_address(value: str) -> bool:
    """True for a plain IPv4 or IPv6 address (no zone id, no brackets)."""
    if not re.fullmatch(r"[0-9A-Fa-f.:]+", value):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _site(value: str) -> str:
    if not (_DNS_NAME.match(value) or is_ip_address(value)):
        raise ValueError("is not a lowercase DNS name or an IP address")
    return value


def _ip_address(value: str) -> str:
    if not is_ip_address(value):
        raise ValueError("is not an IP address")
    return value


IpAddress = Annotated[str, AfterValidator(_ip_address)]
"""A plain IPv4 or IPv6 address (no zone id)."""
SiteAddress = Annotated[str, AfterValidator(_site)]
"""A lowercase DNS name (`llm.example.com`) or a plain IP address."""
Email = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9._%+-]+@([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
]
"""An e-mail address of plain characters (it goes into a Caddyfile)."""


def _absolute_path(value: str) -> str:
    if len(value) > 1024 or any(len(part) > 255 for part in value.split("/")):
        raise ValueError("is too long for a path (1024 characters, 255 per name)")
    if not re.fullmatch(r"/[A-Za-z0-9._@+/-]*", value):
        raise ValueError("must be an absolute path of the characters A-Za-z0-9._@+-/")
    if value == "/" or posixpath.normpath(value) != value:
        raise ValueError(
            f"must be a normal absolute path below / (no ., .., // or trailing /: "
            f"{posixpath.normpath(value)!r}?)"
        )
    return value


AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
"""A normalised absolute path below `/` that needs no quoting in a script or compose file."""


def _valid_image(value: str) -> str:
    try:
        parse_image(value)
    except ValueError as exc:
        raise ValueError(f"is not an image reference: {exc}") from None
    return value


ImageReference = Annotated[str, Field(max_length=512), AfterValidator(_valid_image)]
"""A well-formed image reference (`repo[:tag][@sha256:...]`); pinning is checked per stack."""


def image_problems(key: str, image: str, allowed: bool, example: str) -> list[str]:
    """A floating image tag, unless the stack explicitly allows one."""
    if allowed or parse_image(image).pinned:
        return []
    flag = key.rsplit(".", 1)[0] + ".allowFloatingImage"
    return [f"{key}: {image!r} is a floating tag (pin {example}; or set {flag}: true)"]
