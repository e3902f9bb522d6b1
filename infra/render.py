"""`llm-infra render`: run the real program under Pulumi mocks and write what it would create.

Nothing here builds resources itself: the stack file becomes Pulumi config, `infra.program.main`
runs inside a stack exactly as under `pulumi up`, and a recording monitor keeps every
registration (inputs as Pulumi sends them) and the stack outputs. `infra.render_out` writes
them to the out folder.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import empty_pb2
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import run_in_stack

from components.vllm.host_scripts import remote_script
from infra.config import NAMESPACE, SECRET_PLACEHOLDER
from infra.render_out import Rendered as Rendered
from infra.render_out import kubernetes_manifests

STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass
class Registration:
    """One RegisterResource call as the engine saw it."""

    type: str
    name: str
    urn: str
    parent_urn: str
    inputs: Any
    options: dict[str, Any]


def asset_bytes(asset: Any) -> bytes:
    """The content of a string or file asset."""
    if isinstance(asset, pulumi.StringAsset):
        return str(asset.text).encode()
    if isinstance(asset, pulumi.FileAsset):
        return Path(str(asset.path)).read_bytes()
    raise TypeError(f"unsupported asset {type(asset).__name__}")


def clean(value: Any) -> Any:
    """Engine values made plain: secrets masked, assets by digest, whole floats as ints."""
    if rpc.is_rpc_secret(value):
        inner = rpc.unwrap_rpc_secret(value)
        if isinstance(inner, dict) and inner and all(isinstance(v, str) for v in inner.values()):
            # A Secret's stringData: its keys are names, not secrets, and a manifest needs them.
            return {k: SECRET_PLACEHOLDER for k in sorted(inner)}
        return SECRET_PLACEHOLDER
    if isinstance(value, pulumi.StringAsset | pulumi.FileAsset):
        content = asset_bytes(value)
        # Contents go to files/ at their remote path; a machine's own paths stay out of renders.
        kind = "stringAsset" if isinstance(value, pulumi.StringAsset) else "fileAsset"
        return {kind: {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}}
    if isinstance(value, dict):
        return {k: clean(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A mock monitor that also keeps each registration's options and the stack outputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.stack_outputs: dict[str, Any] = {}
        self._thread_loops: list[asyncio.AbstractEventLoop] = []
        self._loops_lock = threading.Lock()

    def _thread_loop(self) -> None:
        """Give the calling executor thread an event loop of its own and keep it to close.

        Pulumi's mock monitor runs in the program's executor threads and makes a loop in each
        (`_ensure_event_loop`) that nothing closes; left to the interpreter's exit, closing one
        can print a traceback after the program's own output.
        """
        if threading.current_thread() is threading.main_thread():
            return
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            loop = None
        if loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            with self._loops_lock:
                self._thread_loops.append(loop)

    def close_thread_loops(self) -> None:
        """Close the loops the executor threads were given (after the threads are done)."""
        with self._loops_lock:
            loops, self._thread_loops = self._thread_loops, []
        for loop in loops:
            if not loop.is_running():
                loop.close()

    def Invoke(self, request: Any) -> Any:
        self._thread_loop()
        return super().Invoke(request)

    def ReadResource(self, request: Any) -> Any:
        self._thread_loop()
        return super().ReadResource(request)

    def RegisterResource(self, request: Any) -> Any:
        self._thread_loop()
        response = super().RegisterResource(request)
        if request.type != STACK_TYPE:
            options: dict[str, Any] = {}
            if request.protect:
                options["protect"] = True
            if request.deleteBeforeReplace:
                options["deleteBeforeReplace"] = True
            if request.replaceOnChanges:
                options["replaceOnChanges"] = list(request.replaceOnChanges)
            timeouts = {
                k: getattr(request.customTimeouts, k)
                for k in ("create", "update", "delete")
                if getattr(request.customTimeouts, k)
            }
            if timeouts:
                options["customTimeouts"] = timeouts
            if request.dependencies:
                options["dependsOn"] = list(request.dependencies)
            if request.provider:
                # A provider reference is `<urn>::<id>`.
                options["provider"] = request.provider.rsplit("::", 1)[0]
            self.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent_urn=request.parent,
                    inputs=rpc.deserialize_properties(request.object),
                    options=options,
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if request.urn.endswith(f"::{STACK_TYPE}::" + request.urn.rsplit("::", 1)[-1]):
            self.stack_outputs = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


class EchoMocks(pulumi.runtime.Mocks):
    """Resources come back with their inputs as state and their name as id."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return args.name, args.inputs

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def run_program(
    program: Callable[[], None],
    config: dict[str, str],
    secret_keys: list[str],
    stack: str,
    project: str = NAMESPACE,
    monitor: RecordingMonitor | None = None,
    preview: bool = True,
) -> Rendered:
    """Run a Pulumi program under mocks with the given config; return what it registered.

    `preview` is what `pulumi.runtime.is_dry_run()` tells the program: a render is a preview
    by default; `preview=False` runs the program as `pulumi up` would.
    """
    monitor = monitor or RecordingMonitor(EchoMocks())
    warnings = _WarningLog()
    features = set(monitor.GetDeploymentInfo(empty_pb2.Empty()).supportedFeatures)
    settings.configure(
        pulumi_mocks.MockSettings(
            monitor=monitor,
            monitor_features=features,
            engine=pulumi_mocks.MockEngine(warnings.logger),
            project=project,
            stack=stack,
            dry_run=preview,
            organization="organization",
            callbacks=None,
        )
    )
    settings.ROOT.set(None)
    runtime_config.set_all_config(config, secret_keys)
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(run_in_stack(program))
    finally:
        # The monitor's calls run in the loop's executor threads: wait for them, then close
        # the loops they were given and this one.
        loop.run_until_complete(loop.shutdown_default_executor())
        monitor.close_thread_loops()
        asyncio.set_event_loop(None)
        loop.close()
    rendered = _collect(monitor)
    rendered.warnings = list(dict.fromkeys(warnings.messages))
    return rendered


class _WarningLog(logging.Handler):
    """Collects the program's `pulumi.log.warn` messages (the mock engine logs them here)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.logger = logging.Logger("llm-infra-render", logging.WARNING)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def floating_images(rendered: Rendered) -> list[str]:
    """Every image reference in the render that does not name one build (no digest, no build
    tag), from container specs and compose files alike, each once."""
    from components.images import parse_image

    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "image" and isinstance(item, str):
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for resource in rendered.resources:
        walk(resource.get("inputs"))
    for path, content in rendered.files.items():
        if path.endswith(("compose.yaml", "compose.yml")):
            walk(yaml.safe_load(content))
    floating = []
    for image in dict.fromkeys(found):
        try:
            pinned = parse_image(image).pinned
        except ValueError:
            pinned = False
        if not pinned:
            floating.append(image)
    return floating


def dependency_order(registrations: list[Registration]) -> list[Registration]:
    """Registrations with each after its parent, provider and dependsOn; ties broken by name.

    The engine's own arrival order depends on when each resource's inputs resolve, so it is not
    stable between runs; this order is, and it is an order in which Pulumi could create them.
    """
    by_urn = {r.urn: r for r in registrations}
    needs: dict[str, set[str]] = {}
    for r in registrations:
        wanted = {r.parent_urn, r.options.get("provider", ""), *r.options.get("dependsOn", [])}
        needs[r.urn] = {urn for urn in wanted if urn in by_urn}
    ready = sorted((r.name, r.type, r.urn) for r in registrations if not needs[r.urn])
    ordered: list[Registration] = []
    while ready:
        _, _, urn = ready.pop(0)
        ordered.append(by_urn[urn])
        for other, wanted in needs.items():
            if urn in wanted:
                wanted.discard(urn)
                if not wanted:
                    ready.append((by_urn[other].name, by_urn[other].type, other))
        ready.sort()
    if len(ordered) != len(registrations):
        raise RuntimeError("resources depend on each other in a cycle")
    return ordered


def _collect(monitor: RecordingMonitor) -> Rendered:
    names = {r.urn: r.name for r in monitor.registrations}
    resources = []
    for r in dependency_order(monitor.registrations):
        options = dict(r.options)
        if "dependsOn" in options:
            # The engine's order of dependencies is a set's order: sort it for stable output.
            options["dependsOn"] = sorted(names.get(urn, urn) for urn in options["dependsOn"])
        if "provider" in options:
            options["provider"] = names.get(options["provider"], options["provider"])
        entry: dict[str, Any] = {
            "type": r.type,
            "name": r.name,
            "parent": names.get(r.parent_urn),
            "inputs": clean(r.inputs),
        }
        if options:
            entry["options"] = options
        resources.append(entry)
    rendered = Rendered(resources=resources, outputs=clean(monitor.stack_outputs))
    rendered.manifests = kubernetes_manifests(resources)
    ordered = dependency_order(monitor.registrations)
    for r in ordered:
        if r.type == "command:remote:CopyToRemote" and isinstance(r.inputs, dict):
            source = r.inputs.get("source")
            if isinstance(source, pulumi.StringAsset | pulumi.FileAsset):
                rendered.files[str(r.inputs["remotePath"])] = asset_bytes(source)
    commands = [r for r in ordered if r.type == "command:remote:Command"]
    for index, r in enumerate(commands, start=1):
        create = r.inputs.get("create") if isinstance(r.inputs, dict) else None
        if isinstance(create, str):
            # The script itself, as shellcheck and a reviewer read it; resources.json keeps the
            # command that runs it. Another program's command is shown as it is.
            script = remote_script(create)
            rendered.commands[f"{index:02d}-{r.name}.sh"] = create if script is None else script
    return rendered
