"""What a change to a render does, resource by resource: create, update, replace or delete.

Two renders (`llm-infra render` directories) are compared on `resources.json`. Whether a change
is an update or a replacement is what the providers decide, read from their own sources:

- pulumi-kubernetes: `provider/pkg/provider/forcenew.go`, the `forceNew` table (a change of
  `metadata.name`/`namespace` replaces any object; Job `spec.selector`/`spec.template`,
  ConfigMap `data`/`binaryData`, Secret `type`/`data`/`stringData`, PVC `spec` (its access
  modes, resources, selector, storage class, volume), Service `spec.clusterIP`/`spec.type`,
  Deployment `spec.selector`, and Pod containers' image, env, probes and security context);
- pulumi-command 1.2: the SDK registers `remote.Command` and `remote.CopyToRemote` with
  `replace_on_changes=["triggers[*]"]` (`pulumi_command/remote/command.py`), so a change of
  `triggers` replaces; any other input (`create`, `update`, `source`, ...) is an update;
- a resource's own `replaceOnChanges` option, when the render records one.

`python -m infra.render_diff OLD_DIR NEW_DIR` prints the summary (the PR preview uses it).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_POD_CONTAINER_FIELDS = (
    "env",
    "image",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "securityContext",
    "terminationMessagePath",
    "workingDir",
)
_PVC_FIELDS = ("accessModes", "resources", "selector", "storageClassName", "volumeName")
# kind → paths (dotted, below the object) whose change replaces it; metadata.name/namespace
# apply to every kind. From pulumi-kubernetes' forceNew table (see the module docstring).
KUBERNETES_REPLACE_ON_CHANGE: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec.selector",),
    "StatefulSet": (
        "spec.podManagementPolicy",
        "spec.revisionHistoryLimit",
        "spec.selector",
        "spec.serviceName",
        "spec.volumeClaimTemplates",
    ),
    "Job": ("spec.selector", "spec.template"),
    "ConfigMap": ("binaryData", "data"),
    "Secret": ("type", "stringData", "data"),
    "PersistentVolumeClaim": tuple(f"spec.{name}" for name in _PVC_FIELDS),
    "Service": ("spec.clusterIP", "spec.type"),
    "ResourceQuota": ("spec.scopes",),
    "PodDisruptionBudget": ("spec",),
    "RoleBinding": ("roleRef",),
    "ClusterRoleBinding": ("roleRef",),
    "StorageClass": ("parameters", "provisioner"),
}
COMMAND_REPLACE_ON_CHANGE = ("triggers",)
"""pulumi-command's `replace_on_changes=["triggers[*]"]` on remote.Command and CopyToRemote."""
_GPU_SERVERS = ("llama-server", "vllm")


@dataclass(frozen=True)
class Change:
    """One resource's change between two renders."""

    type: str
    name: str
    """The Pulumi resource name."""
    display: str
    """How a person names it: `Deployment llm/deepseek-v4-flash-0731`, `Command vllm-up`."""
    action: str
    """create, update, replace or delete."""
    effects: list[str] = field(default_factory=list)
    """What else happens: `pod restart`, `model reload`, the fields that force a replace."""

    def line(self) -> str:
        """`Deployment llm/x: update (pod restart, model reload)`."""
        effects = f" ({', '.join(self.effects)})" if self.effects else ""
        return f"{self.display}: {self.action}{effects}"

    def to_json(self) -> dict[str, Any]:
        """The change as the `-o json` shape has it: its fields, in their order."""
        return dataclasses.asdict(self)


def _get(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _kind(resource_type: str) -> str | None:
    """`kubernetes:apps/v1:Deployment` → `Deployment`; None for other providers."""
    if not resource_type.startswith("kubernetes:"):
        return None
    return resource_type.rsplit(":", 1)[-1]


def display_name(resource: dict[str, Any]) -> str:
    """`Deployment llm/name` for a Kubernetes object, `Command name` for anything else."""
    kind = _kind(resource["type"])
    inputs = resource.get("inputs") or {}
    if kind is not None:
        metadata = inputs.get("metadata") or {}
        name = metadata.get("name", resource["name"])
        namespace = metadata.get("namespace")
        return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    return f"{resource['type'].rsplit(':', 1)[-1]} {resource['name']}"


def replace_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The changed inputs that make the provider replace the resource (empty: an update)."""
    kind = _kind(new["type"])
    before, after = old.get("inputs") or {}, new.get("inputs") or {}
    paths: list[str] = list((new.get("options") or {}).get("replaceOnChanges") or [])
    if kind is not None:
        paths += ["metadata.name", "metadata.namespace"]
        paths += KUBERNETES_REPLACE_ON_CHANGE.get(kind, ())
        if kind == "Pod":
            before_containers = _get(before, "spec.containers") or []
            after_containers = _get(after, "spec.containers") or []
            if [{f: c.get(f) for f in _POD_CONTAINER_FIELDS} for c in before_containers] != [
                {f: c.get(f) for f in _POD_CONTAINER_FIELDS} for c in after_containers
            ]:
                return ["spec.containers"]
    elif new["type"].startswith("command:"):
        paths += COMMAND_REPLACE_ON_CHANGE
    return [path for path in paths if _get(before, path) != _get(after, path)]


def _runs_gpu_server(resource: dict[str, Any]) -> bool:
    text = json.dumps(resource.get("inputs") or {})
    return any(server in text for server in _GPU_SERVERS)


def effects(old: dict[str, Any], new: dict[str, Any], replaced: list[str]) -> list[str]:
    """What a person should expect beyond the resource itself."""
    found = [f"replaced because {', '.join(replaced)} changed"] if replaced else []
    kind = _kind(new["type"])
    before, after = old.get("inputs") or {}, new.get("inputs") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        if _get(before, "spec.template") != _get(after, "spec.template") or replaced:
            found.append("pod restart")
            if _runs_gpu_server(new):
                found.append("model reload")
    elif kind == "Job" and replaced:
        found.append("the Job runs again")
    elif new["type"] == "command:remote:Command":
        found.append("runs again on the host")
        if "docker compose" in json.dumps(after) and _runs_gpu_server(new):
            found.append("container restart, model reload")
    elif new["type"] == "command:remote:CopyToRemote":
        found.append("file rewritten on the host")
    return found


def resource_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[Change]:
    """Every resource that differs, in the new render's order (deletions last)."""
    before = {(r["type"], r["name"]): r for r in old}
    after = {(r["type"], r["name"]): r for r in new}
    changes = []
    for key, resource in after.items():
        previous = before.get(key)
        if previous is None:
            changes.append(Change(key[0], key[1], display_name(resource), "create"))
            continue
        if previous.get("inputs") == resource.get("inputs") and previous.get(
            "options"
        ) == resource.get("options"):
            continue
        replaced = replace_fields(previous, resource)
        action = "replace" if replaced else "update"
        changes.append(
            Change(
                key[0],
                key[1],
                display_name(resource),
                action,
                effects(previous, resource, replaced),
            )
        )
    for key, resource in before.items():
        if key not in after:
            changes.append(Change(key[0], key[1], display_name(resource), "delete"))
    return changes


def _resources(render_dir: Path) -> list[dict[str, Any]]:
    path = render_dir / "resources.json"
    if not path.is_file():
        return []  # a stack new in this change: every resource is a create
    resources: list[dict[str, Any]] = json.loads(path.read_text())
    return resources


def render_changes(old_dir: Path, new_dir: Path) -> list[Change]:
    """The resource changes from one render directory to another."""
    return resource_changes(_resources(old_dir), _resources(new_dir))


def summary(changes: list[Change]) -> str:
    """One line per changed resource, then the counts; `no resource changes` when none."""
    if not changes:
        return "no resource changes\n"
    counts: dict[str, int] = {}
    for change in changes:
        counts[change.action] = counts.get(change.action, 0) + 1
    totals = ", ".join(
        f"{counts[a]} to {a}" for a in ("create", "update", "replace", "delete") if a in counts
    )
    return "".join(change.line() + "\n" for change in changes) + f"resources: {totals}\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m infra.render_diff OLD_DIR NEW_DIR`: print the summary; exit 0."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m infra.render_diff OLD_DIR NEW_DIR", file=sys.stderr)
        return 2
    sys.stdout.write(summary(render_changes(Path(args[0]), Path(args[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
