"""The grammars of every string input: names, hosts, paths, CIDRs, URLs, e-mails, SSH keys.

Each is an `Annotated` type that pydantic enforces. The components' input types use them, and
the stack file's models (`infra/config/`) use the same ones, so a rule has one home whichever
door a value comes through. Values that pass need no quoting in a script, a compose file, a
Caddyfile or YAML: nothing that could end a line, a word or a block gets through.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import posixpath
import re
import struct
import urllib.parse
from collections.abc import Mapping
from typing import Annotated, Any, NotRequired

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from components.gguf_header import ARCHITECTURE_PATTERN
from components.images import parse_image
from components.llama_archs import unknown_architecture
from components.payloads.fetcher import ModelFile
from components.validation import Problem, cross_field_rule, error_messages

Port = Annotated[int, Field(ge=1, le=65535)]
NodePortNumber = Annotated[int, Field(ge=30000, le=32767)]
"""A NodePort: Kubernetes' default --service-node-port-range (k3s keeps it)."""
DnsLabel = Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")]
_QUANTITY = re.compile(r"^(?P<num>[0-9]+(\.[0-9]+)?)(?P<unit>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_UNITS = {
    None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
QUANTITY_PATTERN = _QUANTITY.pattern
"""The Kubernetes quantity grammar, as pydantic reports it in a pattern mismatch."""
Quantity = Annotated[str, Field(pattern=_QUANTITY.pattern)]


def quantity_value(quantity: str) -> float:
    """A Kubernetes quantity as a number (cores or bytes)."""
    match = _QUANTITY.match(quantity)
    if match is None:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity")
    return float(match["num"]) * _UNITS[match["unit"]]


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


def _architecture(value: str) -> str:
    problem = unknown_architecture(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Architecture = Annotated[
    str, Field(pattern=f"^{ARCHITECTURE_PATTERN}$"), AfterValidator(_architecture)
]
"""A GGUF `general.architecture` as llama.cpp names it (`deepseek4`, `qwen3moe`, `gpt-oss`): one
of the names llama.cpp b11434 loads (`components/llama_archs.json`), in the GGUF reader's own
grammar (`components.gguf_header`)."""
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


_SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
_KEY_LINE = re.compile(
    r"(?:(?P<hosts>[A-Za-z0-9.:,\[\]*?-]+) )?(?P<type>[a-z0-9@.-]+) (?P<blob>[A-Za-z0-9+/]+={0,3})"
    r"(?: (?P<comment>[A-Za-z0-9@._+:-]{1,128}))?"
)
_FINGERPRINT = re.compile(
    r"(SHA256:[A-Za-z0-9+/]{43}=?|MD5(:[0-9a-f]{2}){16}|([0-9a-f]{2}:){15}[0-9a-f]{2})"
)


def _blob_fields(blob: bytes) -> list[bytes]:
    """The length-prefixed strings of an SSH public key blob (RFC 4253 section 6.6)."""
    fields = []
    while blob:
        if len(blob) < 4:
            raise ValueError("ends inside a length field")
        (length,) = struct.unpack(">I", blob[:4])
        if length > len(blob) - 4:
            raise ValueError("has a field longer than the key")
        fields.append(blob[4 : 4 + length])
        blob = blob[4 + length :]
    return fields


def ssh_host_key(value: str) -> str:
    """A host's public key as `TYPE BASE64`, from a line as people paste it.

    Accepts what `ssh-keyscan` prints (a leading host name) and a trailing comment; the key
    blob is decoded and its type must be the one the line names.
    """
    text = value.strip(" ")
    if _FINGERPRINT.fullmatch(text):
        raise ValueError(
            "is a key fingerprint, not the key: give the public key line `TYPE BASE64` "
            "(`ssh-keyscan -t ed25519 HOST` prints it)"
        )
    match = _KEY_LINE.fullmatch(text)
    if match is None or match["type"] not in _SSH_KEY_TYPES:
        raise ValueError(
            f"is not an SSH public key line `TYPE BASE64` (types: {', '.join(_SSH_KEY_TYPES)})"
        )
    try:
        fields = _blob_fields(base64.b64decode(match["blob"], validate=True))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"has a key that does not decode ({exc})") from None
    if not fields or fields[0] != match["type"].encode():
        raise ValueError(f"has a key blob that is not an {match['type']} key")
    if match["type"] == "ssh-ed25519" and (len(fields) != 2 or len(fields[1]) != 32):
        raise ValueError("has an ssh-ed25519 key that is not 32 bytes")
    if match["type"] != "ssh-ed25519" and len(fields) < 2:
        raise ValueError(f"has an {match['type']} key blob without key material")
    return f"{match['type']} {match['blob']}"


SshHostKey = Annotated[str, AfterValidator(ssh_host_key)]
"""An SSH host public key: `[host ]TYPE BASE64[ comment]`, the blob's type matching TYPE."""
SshUser = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]
"""A POSIX user name."""
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A sha256 digest in lowercase hex."""


def _file_name(value: str) -> str:
    if value in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._@+=-]{1,255}", value):
        raise ValueError("is not a file name (letters, digits and ._@+=-, no / or ..)")
    return value


FileName = Annotated[str, AfterValidator(_file_name)]
"""One file name, no directory: `Model-00001-of-00003.gguf`."""


def _rpc_endpoint(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("is not host:port with a port in 1-65535")
    host = host.removeprefix("[").removesuffix("]")
    plain_name = re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", host)
    if not (_DNS_NAME.match(host) or is_ip_address(host) or plain_name):
        raise ValueError("names no valid host (a DNS name, a Service name or an IP address)")
    return value


RpcEndpoint = Annotated[str, AfterValidator(_rpc_endpoint)]
"""An rpc-server address `host:port` (a Service DNS name or an IP address)."""
UrlPath = Annotated[str, Field(pattern=r"^/[A-Za-z0-9._~/-]{0,1023}$")]
"""An absolute URL path of plain characters (`/health`)."""
ResourceName = Annotated[
    str, Field(pattern=r"^([a-z0-9.-]{1,253}/)?[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
]
"""A Kubernetes resource name: `cpu`, `memory`, `amd.com/gpu`."""
ExtendedResource = Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$")]
"""A device plugin's extended resource (`amd.com/gpu`)."""
JobPattern = Annotated[str, Field(pattern=r"^[A-Za-z0-9._*+?()|^$\[\]{},-]{1,256}$")]
"""A regex of Job names for a PromQL matcher: no quotes, backslashes or spaces."""
StreamCount = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,3}$")]
"""A number of concurrent streams as a key (`"8"`)."""
RepoId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*/[A-Za-z0-9][-A-Za-z0-9_.]*$")]
"""A Hugging Face repo id `owner/name`."""
Revision = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")]
"""A branch, tag or commit sha."""
StorageClass = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")]
"""A Kubernetes storage class name (`local-path`)."""
FilePattern = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9._*?\[\]+=@][A-Za-z0-9._*?\[\]+=@-]{0,254}$")
]
"""A file name or glob of file names on the volume (no `/`, no leading `-`)."""


class _ModelFileGrammar(TypedDict):
    path: RepoPath
    name: FileName
    size: NotRequired[Annotated[int, Field(ge=0)] | None]
    sha256: NotRequired[Sha256 | None]


_MODEL_FILE = TypeAdapter(_ModelFileGrammar)


@cross_field_rule(ModelFile)
def model_file_problems(file: Mapping[str, Any]) -> list[Problem]:
    """A model file's path, name and sha256 by their grammars (the fetcher's type is stdlib)."""
    try:
        _MODEL_FILE.validate_python(dict(file))
    except ValidationError as error:
        return error_messages(error)
    return []


def _patch_source(value: str) -> str:
    if value.startswith("/"):
        return _absolute_path(value)
    return _repo_path(value)


PatchSource = Annotated[str, AfterValidator(_patch_source)]
"""A local file: relative to the Pulumi project (no `..`) or an absolute path."""


def env_file_value(value: str) -> str:
    """A value for a single-quoted compose env-file line (`KEY='value'`), unchanged."""
    if not value or any(char in value for char in "'\n\r\0"):
        # The value is a secret: the message never shows it.
        raise PydanticCustomError(
            "secret_value",
            "must be non-empty, without single quotes or line breaks (it is written to a "
            "compose env file as KEY='value')",
        )
    return value


EnvFileSecret = Annotated[str, AfterValidator(env_file_value)]
"""A secret that goes into a compose env file: any text but `'`, line breaks and NUL."""
