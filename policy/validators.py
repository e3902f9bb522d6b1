"""Pure validators of llm-infra resources: the rules of the policy pack, testable without Pulumi.

Each `check_*` takes one resource as `llm-infra render` writes it to resources.json
(`{"type", "name", "inputs", "options"}`) and, for files copied to a host, `files`: remote path →
text (a render's `files/` directory; the asset's text under `pulumi preview`). It returns one
message per violation, empty when the resource passes. `check_render` runs them all on a render
directory; `python -m policy.validators RENDER_DIR...` does that from the shell.
"""

# Just over ~400 lines: one check per rule of the policy pack, beside the runner that the pack
# and `llm-infra policy` share.

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.images import parse_image
from policy.caddy import caddy_adapt, caddy_allowlist_problems
from policy.resources import (
    Files,
    Resource,
    compose_services,
    containers,
    duration_seconds,
    kind_of,
    remote_file,
)

# Matches infra's default `server.minLoadSeconds`: a server must be given at least this long.
DEFAULT_MIN_LOAD_SECONDS = 300
# What the placeholder for a Pulumi secret looks like in a render.
SECRET_PLACEHOLDER = "[secret]"

_SECRET_ENV_NAME = re.compile(
    r"(^|_)(HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN|TOKEN|API_KEY|APIKEY|SECRET|"
    r"PASSWORD|PASSWD|PRIVATE_KEY|ACCESS_KEY)($|_)",
    re.IGNORECASE,
)
# Shapes of real credentials: Hugging Face tokens, OpenAI-style keys, GitHub tokens, AWS keys.
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16})\b"
)
_SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--password", "--secret")
# A flag whose value is expanded at run time names a variable, not a literal secret.
_REFERENCE = re.compile(r"^(\$\(\w+\)|\$\{?\w+\}?|\"?\$\{?\w+\}?\"?)$")
_GPU_SERVER_HINT = re.compile(r"llama-server|llama\.cpp|vllm", re.IGNORECASE)


@dataclass(frozen=True)
class Violation:
    """One broken rule: which policy, which resource, and what to change."""

    policy: str
    resource: str
    message: str

    def __str__(self) -> str:
        return f"[{self.policy}] {self.resource}: {self.message}"


# --- images ---------------------------------------------------------------------------------


def _image_problem(where: str, image: object) -> str | None:
    if not isinstance(image, str):
        return f"{where} has no image"
    try:
        ref = parse_image(image)
    except ValueError as exc:
        return f"{where} image {image!r} is invalid: {exc}"
    if not ref.pinned:
        return (
            f"{where} image {image!r} is not pinned: use a digest (@sha256:...) or a tag that "
            "names one build (x.y.z or bNNNN)"
        )
    return None


def check_images_pinned(resource: Resource, files: Files | None = None) -> list[str]:
    """Every container image (Kubernetes workloads, compose services) names exactly one build."""
    problems = [
        _image_problem(f"container {c.get('name', '?')}", c.get("image"))
        for c in containers(resource)
    ]
    problems += [
        _image_problem(f"compose service {name}", service.get("image"))
        for name, service in compose_services(resource, files).items()
    ]
    return [p for p in problems if p]


# --- GPU server probes ----------------------------------------------------------------------


# llama.cpp's rpc-server loads no model (its head sends the weights) and serves one client at a
# time, so no probe can watch it without disturbing the head: it is no GPU server here.
_RPC_SERVERS = ("ggml-rpc-server", "rpc-server")


def _is_gpu_server(container: Mapping[str, Any]) -> bool:
    command = container.get("command") or []
    if command and isinstance(command[0], str) and command[0].rsplit("/", 1)[-1] in _RPC_SERVERS:
        return False
    words = [container.get("name"), container.get("image")]
    words += [*(container.get("command") or []), *(container.get("args") or [])[:1]]
    if any(isinstance(w, str) and _GPU_SERVER_HINT.search(w) for w in words):
        return True
    limits = ((container.get("resources") or {}).get("limits")) or {}
    return any(str(key).endswith("/gpu") for key in limits)


def probe_window_seconds(probe: Mapping[str, Any]) -> int:
    """How long a probe lets a container fail before Kubernetes restarts it (k8s defaults)."""
    return int(probe.get("initialDelaySeconds", 0)) + int(probe.get("periodSeconds", 10)) * int(
        probe.get("failureThreshold", 3)
    )


def check_gpu_server_probes(
    resource: Resource,
    files: Files | None = None,
    min_load_seconds: int = DEFAULT_MIN_LOAD_SECONDS,
) -> list[str]:
    """A GPU server survives its model load: a startup (else liveness) probe, compose healthcheck
    or `up --wait-timeout` that allows at least `min_load_seconds`."""
    problems: list[str] = []
    # A Job or CronJob runs to completion (a node preflight in the server image): no server.
    run_to_completion = kind_of(resource) in ("Job", "CronJob")
    for container in [] if run_to_completion else containers(resource):
        if not _is_gpu_server(container):
            continue
        name = container.get("name", "?")
        startup, liveness = container.get("startupProbe"), container.get("livenessProbe")
        probe, which = (startup, "startupProbe") if startup else (liveness, "livenessProbe")
        if not isinstance(probe, Mapping):
            problems.append(
                f"container {name}: a GPU server without a startupProbe or livenessProbe; a "
                f"model load of {min_load_seconds}s or more needs a startupProbe that allows it"
            )
            continue
        window = probe_window_seconds(probe)
        if window < min_load_seconds:
            problems.append(
                f"container {name}: {which} allows {window}s (initialDelaySeconds + periodSeconds"
                f" x failureThreshold), less than the {min_load_seconds}s model load: the pod "
                "would be killed while loading (raise failureThreshold)"
            )
    for service_name, service in compose_services(resource, files).items():
        words = [service.get("image"), *_argv(service.get("entrypoint"))]
        if not any(isinstance(w, str) and _GPU_SERVER_HINT.search(w) for w in words):
            continue
        check = service.get("healthcheck")
        if not isinstance(check, Mapping) or check.get("disable") or not check.get("test"):
            problems.append(
                f"compose service {service_name}: a GPU server without a healthcheck, so "
                "`docker compose up --wait` cannot tell a loaded server from a loading one"
            )
            continue
        try:
            allowed = duration_seconds(check.get("start_period", 0)) + duration_seconds(
                check.get("interval", "30s")
            ) * int(check.get("retries", 3))
        except ValueError as exc:
            problems.append(f"compose service {service_name}: healthcheck: {exc}")
            continue
        if allowed < min_load_seconds:
            problems.append(
                f"compose service {service_name}: healthcheck allows {allowed:g}s (start_period "
                f"+ interval x retries), less than the {min_load_seconds}s model load"
            )
    if resource.get("type") == "command:remote:Command":
        script = str((resource.get("inputs") or {}).get("create") or "")
        wait = re.search(r"\bup\b[^\n]*?(?:\\\n[^\n]*?)*--wait-timeout[ =](\d+)", script)
        if wait and int(wait.group(1)) < min_load_seconds:
            problems.append(
                f"`docker compose up --wait-timeout {wait.group(1)}` gives up before the "
                f"{min_load_seconds}s model load"
            )
    return problems


# --- secret literals ------------------------------------------------------------------------


def _argv(value: object) -> list[str]:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return value.split()
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _argv_secrets(where: str, argv: list[str]) -> list[str]:
    problems = []
    for index, word in enumerate(argv):
        flag, eq, inline = word.partition("=")
        if flag not in _SECRET_FLAGS:
            continue
        value = inline if eq else (argv[index + 1] if index + 1 < len(argv) else "")
        if value and not value.startswith("-") and not _REFERENCE.match(value):
            problems.append(
                f"{where}: `{flag}` is given a literal value; pass a file (--api-key-file) or a "
                "variable set from a Secret"
            )
    problems += [
        f"{where}: contains what looks like a credential ({m.group(1)[:5]}...)"
        for m in _SECRET_VALUE.finditer(" ".join(argv))
    ]
    return problems


def _env_secrets(where: str, env: object) -> list[str]:
    """Problems in env given as a k8s list of {name, value} or a compose mapping/list."""
    pairs: list[tuple[str, object]] = []
    if isinstance(env, Mapping):
        pairs = [(str(k), v) for k, v in env.items()]
    elif isinstance(env, list):
        for item in env:
            if isinstance(item, Mapping) and "value" in item:
                pairs.append((str(item.get("name", "?")), item["value"]))
            elif isinstance(item, str) and "=" in item:
                key, _, literal = item.partition("=")
                pairs.append((key, literal))
    problems = []
    for name, value in pairs:
        if value is None or value == "":
            continue
        text = str(value)
        if _SECRET_ENV_NAME.search(name) and not _REFERENCE.match(text):
            problems.append(
                f"{where}: env {name} has a literal value; take it from a Secret "
                "(valueFrom.secretKeyRef, an env_file) instead"
            )
        elif _SECRET_VALUE.search(text):
            problems.append(f"{where}: env {name} holds what looks like a credential")
    return problems


def check_no_secret_literals(resource: Resource, files: Files | None = None) -> list[str]:
    """No credential as a literal in container args/command/env, compose files or scripts."""
    problems: list[str] = []
    for container in containers(resource):
        where = f"container {container.get('name', '?')}"
        argv = [*_argv(container.get("command")), *_argv(container.get("args"))]
        problems += _argv_secrets(where, argv)
        problems += _env_secrets(where, container.get("env"))
    for name, service in compose_services(resource, files).items():
        where = f"compose service {name}"
        argv = [*_argv(service.get("entrypoint")), *_argv(service.get("command"))]
        problems += _argv_secrets(where, argv)
        problems += _env_secrets(where, service.get("environment"))
    if resource.get("type") == "command:remote:Command":
        inputs = resource.get("inputs") or {}
        for key in ("create", "update", "delete"):
            script = inputs.get(key)
            if isinstance(script, str):
                problems += _argv_secrets(f"{key} script", _argv(script))
        problems += _env_secrets("command", inputs.get("environment"))
    return problems


# --- model volumes --------------------------------------------------------------------------


def _is_model_pvc(resource: Resource) -> bool:
    if kind_of(resource) != "PersistentVolumeClaim":
        return False
    metadata = (resource.get("inputs") or {}).get("metadata") or {}
    labels = metadata.get("labels") or {}
    names = [str(resource.get("name", "")), str(metadata.get("name", ""))]
    return labels.get("app.kubernetes.io/name") == "model-store" or any("model" in n for n in names)


def check_model_pvc_protected(resource: Resource, files: Files | None = None) -> list[str]:
    """A PVC holding model weights is `protect`ed: deleting it loses a multi-hour download."""
    if not _is_model_pvc(resource) or (resource.get("options") or {}).get("protect"):
        return []
    return [
        "a model PVC without `protect`: a replace or destroy would delete the downloaded "
        "weights (set ResourceOptions(protect=True))"
    ]


# --- Caddy allowlist ------------------------------------------------------------------------


def check_caddy_allowlist(
    resource: Resource, files: Files | None = None, allow_world: bool = False
) -> list[str]:
    """Every site of a Caddyfile, as Caddy reads it (its adapted JSON), starts with an IP
    allowlist that answers 403 to everyone else, with no route ahead of it, and not open to
    everyone unless `allow_world` is set."""
    found = remote_file(resource, files)
    if found is None or not found[0].endswith("Caddyfile") or allow_world:
        return []
    path, text = found
    try:
        config = caddy_adapt(text)
    except ValueError as exc:
        return [f"{path}: {exc}"]
    return [f"{path}: {problem}" for problem in caddy_allowlist_problems(config)]


# --- running them ---------------------------------------------------------------------------

POLICY_NAMES = (
    "images-pinned",
    "gpu-server-probes",
    "no-secret-literals",
    "model-pvc-protected",
    "caddy-allowlist",
)


def check_resource(
    resource: Resource,
    files: Files | None = None,
    min_load_seconds: int = DEFAULT_MIN_LOAD_SECONDS,
    allow_world: bool = False,
) -> dict[str, list[str]]:
    """Policy name → violation messages of one resource (every policy, empty lists included)."""
    return {
        "images-pinned": check_images_pinned(resource, files),
        "gpu-server-probes": check_gpu_server_probes(resource, files, min_load_seconds),
        "no-secret-literals": check_no_secret_literals(resource, files),
        "model-pvc-protected": check_model_pvc_protected(resource, files),
        "caddy-allowlist": check_caddy_allowlist(resource, files, allow_world),
    }


def check_resources(
    resources: Sequence[Resource],
    files: Files | None = None,
    min_load_seconds: int = DEFAULT_MIN_LOAD_SECONDS,
    allow_world: bool = False,
) -> list[Violation]:
    """Every policy on every resource."""
    return [
        Violation(policy, str(resource.get("name", "?")), message)
        for resource in resources
        for policy, messages in check_resource(
            resource, files, min_load_seconds, allow_world
        ).items()
        for message in messages
    ]


def load_render(render_dir: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """resources.json and the text of every file under files/ (keyed by remote path)."""
    resources: list[dict[str, Any]] = json.loads((render_dir / "resources.json").read_text())
    files: dict[str, str] = {}
    root = render_dir / "files"
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file():
                files["/" + path.relative_to(root).as_posix()] = path.read_text(errors="replace")
    return resources, files


def check_render(
    render_dir: Path, min_load_seconds: int = DEFAULT_MIN_LOAD_SECONDS, allow_world: bool = False
) -> list[Violation]:
    """Every policy on a render directory (what `llm-infra render` wrote)."""
    resources, files = load_render(render_dir)
    return check_resources(resources, files, min_load_seconds, allow_world)


def main(argv: list[str] | None = None) -> int:
    """`python -m policy.validators RENDER_DIR...`: print violations; exit 1 if there are any."""
    parser = argparse.ArgumentParser(
        prog="policy.validators", description="check llm-infra renders against the policy pack"
    )
    parser.add_argument("render_dirs", nargs="+", type=Path, metavar="RENDER_DIR")
    parser.add_argument(
        "--min-load-seconds",
        type=int,
        default=DEFAULT_MIN_LOAD_SECONDS,
        help="the shortest startup window a GPU server's probes may give (default: %(default)s)",
    )
    parser.add_argument("--allow-world", action="store_true", help="allow 0.0.0.0/0 in Caddy")
    args = parser.parse_args(argv)
    found = 0
    for render_dir in args.render_dirs:
        resources, files = load_render(render_dir)
        violations = check_resources(resources, files, args.min_load_seconds, args.allow_world)
        for violation in violations:
            print(f"{render_dir}: {violation}")
        # A pass says what it covered: an empty directory must not read as a clean render.
        print(
            f"{render_dir}: {len(resources)} resources and {len(files)} host files checked "
            f"against {len(POLICY_NAMES)} policies ({', '.join(POLICY_NAMES)}): "
            + (f"{len(violations)} violations" if violations else "no violations")
        )
        found += len(violations)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
