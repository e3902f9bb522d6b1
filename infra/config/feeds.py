"""What each stack settings model feeds: the one mapping from the stack file to the components'
inputs, which the targets build their Args with (`fed`) and which names a refusal
(`infra.config.inputs`).

Each settings model feeds the component inputs of its fields' names (`FEEDS`): a target takes
what a stack gives in one pass (`fed`) and computes only the rest (what comes from the lock,
the plan, the secrets, the names). A field that feeds an input of another name is a deliberate
rename (`Feed.renames`).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, Required, Union, get_args, get_origin

from pydantic import BaseModel
from typing_extensions import is_typeddict

from components.k8s.network_policies import NetworkClient
from components.llamacpp.inputs import (
    LlamaCppRpcWorkerArgs,
    LlamaCppVulkanServerArgs,
    LlamaServerFlags,
)
from components.model_store.inputs import DraftModel, GgufModelStoreArgs, NodePreflight
from components.monitoring.inputs import KubernetesMonitoring
from components.validation_annotations import known_type, type_hints
from components.vllm.inputs import (
    CaddySite,
    HostMonitoring,
    HostRequirements,
    ModelLock,
    PatchOverlay,
    SshConnection,
    VllmFlags,
    VllmRocmServerArgs,
)
from infra.config.base import RepoModelSettings
from infra.config.docker_host import (
    CaddySettings,
    DockerHostModelSettings,
    DockerHostStack,
    HostSettings,
    PatchSettings,
    VllmSettings,
)
from infra.config.kubernetes import (
    KubernetesSettings,
    MemorySettings,
    ModelSettings,
    NetworkClientSettings,
    NetworkSettings,
    StoreSettings,
)
from infra.config.metrics import (
    HostMetricsSettings,
    KubernetesMetricsSettings,
    ScraperSettings,
)
from infra.config.server import RpcSettings, RpcWorkerSettings, ServerSettings

COMPONENT_ARGS: dict[str, type] = {
    "LlamaCppVulkanServer": LlamaCppVulkanServerArgs,
    "LlamaCppRpcWorker": LlamaCppRpcWorkerArgs,
    "GgufModelStore": GgufModelStoreArgs,
    "VllmRocmServer": VllmRocmServerArgs,
}
"""The components a stack file feeds, by name, with their Args."""


@dataclass(frozen=True)
class Feed:
    """A stack settings model that feeds inputs of one TypedDict of a component: each field
    whose name (or rename) is one of its inputs feeds that input, as it is unless the target
    computes it."""

    key: str
    """The settings' stack key (`server`, `server.rpc.workers`; the stack itself: empty)."""
    settings: type[BaseModel]
    component: str
    path: str
    """Where the TypedDict is among the component's inputs (`flags`; its Args: empty)."""
    into: type
    """The TypedDict."""
    renames: Mapping[str, str] = field(default_factory=dict)
    """Field → the input of another name it feeds: the deliberate renames of a field."""
    computed: frozenset[str] = frozenset()
    """Fields whose input the target computes from them (or from more): named by their key
    in a refusal, never copied."""
    only: frozenset[str] | None = None
    """The fields it feeds, where the model has namesakes of other inputs it does not feed."""

    def fields(self) -> dict[str, str]:
        """Each field it feeds → the input's name (the computed ones too)."""
        inputs = type_hints(self.into)
        found = {}
        for name in self.settings.model_fields:
            target = self.renames.get(name, name)
            if target in inputs and (self.only is None or name in self.only):
                found[name] = target
        return found


def _members(annotation: Any) -> list[Any]:
    """The types an input's annotation allows (NotRequired, Annotated and unions undone)."""
    annotation = known_type(annotation)
    while get_origin(annotation) in (NotRequired, Required, Annotated):
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for member in get_args(annotation) for m in _members(member)]
    return [annotation]


def _admits_none(annotation: Any) -> bool:
    return type(None) in _members(annotation) or annotation is Any


def _typeddict(annotation: Any) -> type | None:
    """The TypedDict an input (or each item of a list input) takes, or None."""
    for member in _members(annotation):
        if get_origin(member) is list:
            return _typeddict(get_args(member)[0])
        if is_typeddict(member):
            return member  # type: ignore[no-any-return]
    return None


def _typeddict_at(args: type | None, path: str) -> type | None:
    """The TypedDict at an input path (`metrics.scrapers`: each scraper's) of a component."""
    for part in path.split(".") if path else ():
        args = None if args is None else _typeddict(type_hints(args).get(part))
    return args


def _feeds(*feeds: Feed) -> tuple[Feed, ...]:
    """The table, each entry's names checked: a rename, computed or only name that is no
    field of the model, or a rename to no input, is a typo the table would silently ignore."""
    for feed in feeds:
        fields = feed.settings.model_fields
        inputs = type_hints(feed.into)
        named_fields = {*feed.renames, *feed.computed, *(feed.only or ())}
        wrong = sorted(n for n in named_fields if n not in fields)
        wrong += sorted(n for n in feed.renames.values() if n not in inputs)
        if wrong or _typeddict_at(COMPONENT_ARGS[feed.component], feed.path) is not feed.into:
            raise TypeError(f"{feed.settings.__name__} → {feed.component}.{feed.path}: {wrong}")
    return feeds


FEEDS = _feeds(
    Feed("kubernetes", KubernetesSettings, "LlamaCppVulkanServer", "", LlamaCppVulkanServerArgs),
    Feed("kubernetes", KubernetesSettings, "LlamaCppRpcWorker", "", LlamaCppRpcWorkerArgs),
    Feed("kubernetes", KubernetesSettings, "GgufModelStore", "", GgufModelStoreArgs),
    Feed(
        "server", ServerSettings, "LlamaCppVulkanServer", "flags", LlamaServerFlags,
        renames={"context_size": "ctx_size", "cache_ram": "cache_ram_mib"},
        computed=frozenset({"rpc", "speculative"}),
    ),
    Feed(
        "server", ServerSettings, "LlamaCppVulkanServer", "", LlamaCppVulkanServerArgs,
        computed=frozenset({"image", "runtime", "service_port", "api_key"}),
    ),
    Feed(
        "server", ServerSettings, "LlamaCppRpcWorker", "", LlamaCppRpcWorkerArgs,
        only=frozenset({"gpu_access", "gpu_resource", "run_as_user", "runtime"}),
        computed=frozenset({"runtime"}),
    ),
    Feed(
        "server", ServerSettings, "GgufModelStore", "node_preflight", NodePreflight,
        only=frozenset({"image", "gpu_access"}), computed=frozenset({"image"}),
    ),
    Feed(
        "server.speculative.draft", RepoModelSettings, "GgufModelStore", "draft", DraftModel,
        computed=frozenset({"revision", "files"}),
    ),
    Feed(
        "server.rpc", RpcSettings, "LlamaCppRpcWorker", "", LlamaCppRpcWorkerArgs,
        computed=frozenset({"image"}),
    ),
    Feed("server.rpc.workers", RpcWorkerSettings, "LlamaCppRpcWorker", "", LlamaCppRpcWorkerArgs),
    Feed(
        "model", ModelSettings, "GgufModelStore", "", GgufModelStoreArgs,
        computed=frozenset({"revision", "files"}),
    ),
    Feed(
        "store", StoreSettings, "GgufModelStore", "", GgufModelStoreArgs,
        renames={"size": "volume_size"}, computed=frozenset({"node_preflight"}),
    ),
    Feed("server", ServerSettings, "GgufModelStore", "", GgufModelStoreArgs),
    Feed("memory", MemorySettings, "LlamaCppVulkanServer", "", LlamaCppVulkanServerArgs),
    Feed(
        "memory", MemorySettings, "GgufModelStore", "node_preflight", NodePreflight,
        renames={"vram_gib": "min_gpu_memory_gib", "node_cpu": "cpu_variant"},
        computed=frozenset({"node_cpu"}),
    ),
    Feed("network", NetworkSettings, "LlamaCppVulkanServer", "", LlamaCppVulkanServerArgs),
    Feed(
        "network.clients", NetworkClientSettings, "LlamaCppVulkanServer", "allowed_clients",
        NetworkClient,
    ),
    Feed(
        "network", NetworkSettings, "GgufModelStore", "", GgufModelStoreArgs,
        renames={"policies": "network_policy"},
    ),
    Feed(
        "metrics", KubernetesMetricsSettings, "LlamaCppVulkanServer", "metrics",
        KubernetesMonitoring, computed=frozenset({"scrapers", "monitor_kind", "reference"}),
    ),
    Feed(
        "metrics.scrapers", ScraperSettings, "LlamaCppVulkanServer", "metrics.scrapers",
        NetworkClient,
    ),
    Feed(
        "host", HostSettings, "VllmRocmServer", "connection", SshConnection,
        renames={"address": "host"},
    ),
    Feed(
        "", DockerHostStack, "VllmRocmServer", "", VllmRocmServerArgs,
        only=frozenset({"fetch_image", "patches"}), computed=frozenset({"patches"}),
    ),
    Feed("host", HostSettings, "VllmRocmServer", "", VllmRocmServerArgs),
    Feed("host", HostSettings, "VllmRocmServer", "requirements", HostRequirements),
    Feed(
        "model", DockerHostModelSettings, "VllmRocmServer", "model_lock", ModelLock,
        computed=frozenset({"revision", "files"}),
    ),
    Feed(
        "server", VllmSettings, "VllmRocmServer", "flags", VllmFlags,
        renames={
            "kv_offloading_size": "kv_offloading_size_gib",
            "prefix_caching": "enable_prefix_caching",
            "speculative": "speculative_config",
        },
    ),
    Feed("server", VllmSettings, "VllmRocmServer", "", VllmRocmServerArgs),
    Feed("caddy", CaddySettings, "VllmRocmServer", "caddy", CaddySite),
    Feed(
        "patches", PatchSettings, "VllmRocmServer", "patches", PatchOverlay,
        computed=frozenset({"source"}),
    ),
    Feed(
        "metrics", HostMetricsSettings, "VllmRocmServer", "metrics", HostMonitoring,
        computed=frozenset({"reference"}),
    ),
)  # fmt: skip
"""Every stack settings model that feeds a component, and what it feeds; the feeds of one input
place merge in this order (`fed`)."""


Nested = dict[str, "Nested | None"]
"""How a model becomes a nested input: the inputs of the TypedDict it (or each item of a list
of them) is given as, each with its own (None: a model is dumped as it is)."""


def _nested(annotation: Any) -> Nested | None:
    typed = _typeddict(annotation)
    if typed is None:
        return None
    return {name: _nested(hint) for name, hint in type_hints(typed).items()}


@dataclass(frozen=True)
class _Given:
    """A field a feed gives as it is: the input it is given as, and how."""

    field: str
    input: str
    nested: Nested | None
    admits_none: bool
    """An unset field (None) is given only where its input takes None."""


def _given_fields(feed: Feed) -> tuple[_Given, ...]:
    hints = type_hints(feed.into)
    return tuple(
        _Given(name, target, _nested(hints[target]), _admits_none(hints[target]))
        for name, target in feed.fields().items()
        if name not in feed.computed
    )


_GIVEN = tuple((feed, _given_fields(feed)) for feed in FEEDS)
"""Each feed with the fields it gives as they are, their conversion read once, here."""


Fed = dict[tuple[str, str], Any]
"""What a stack gives as it is: (component, input path) → its inputs (a list: one an item)."""


def fed(stack: BaseModel) -> Fed:
    """What a stack's settings give as it is (`FEEDS`), by (component, input path): each given
    field's value under its input's name, a nested model as the input's TypedDict takes it, the
    feeds of one place merged in FEEDS order; a list of settings (the workers, the clients)
    gives a list, an item each, over what the single settings of that place give."""
    given: Fed = {}
    for feed, fields in _GIVEN:
        settings = _at(stack, feed.key)
        items = settings if isinstance(settings, list) else [settings]
        if not all(isinstance(item, feed.settings) for item in items):
            continue
        before = given.get((feed.component, feed.path), {})
        rows = [
            {**row, **_inputs(item, fields)}
            for row in (before if isinstance(before, list) else [before])
            for item in items
        ]
        many = isinstance(settings, list) or isinstance(before, list)
        given[feed.component, feed.path] = rows if many else rows[0]
    return given


def _at(stack: BaseModel, key: str) -> Any:
    """The settings at a stack key (`server.rpc`), or None where a part is unset."""
    value: Any = stack
    for part in key.split(".") if key else ():
        value = getattr(value, part, None)
    return value


def _inputs(settings: BaseModel, fields: tuple[_Given, ...]) -> dict[str, Any]:
    given: dict[str, Any] = {}
    for each in fields:
        value = _input_value(getattr(settings, each.field), each.nested)
        if value is not None or each.admits_none:
            given[each.input] = value
    return given


def _input_value(value: Any, nested: Nested | None) -> Any:
    """A settings value as its input takes it (containers copied)."""
    if isinstance(value, BaseModel):
        if nested is None:
            return value.model_dump()
        return {
            name: _input_value(getattr(value, name), inner)
            for name, inner in nested.items()
            if name in type(value).model_fields
        }
    if isinstance(value, list):
        return [_input_value(item, nested) for item in value]
    if isinstance(value, dict):
        return dict(value)
    return value
