"""The MI300X host's bundle: every file and script VllmRocmServer puts on the host, built once.

`host_bundle` is a pure function of the validated inputs and the stack name: each file with its
remote path, mode and resource name, and each remote command's script with the resources it runs
after. The component maps the bundle to pulumi-command resources in one pass; `render` writes the
same contents (it reads them back from those resources). Secrets are never part of the bundle:
the env file names the input that holds its key, which stays a Pulumi Output.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Literal

from components.payloads import (
    EXPECTED_PROPS_FILE,
    FETCHER_SOURCE,
    HTTP_POLICY_FILE,
    HTTP_POLICY_SOURCE,
    PROPS_FILE,
    PROPS_SOURCE,
    VERIFY_SOURCE,
)
from components.payloads.fetcher import fetch_document
from components.payloads.props import props_text
from components.vllm.builders import (
    compose_file,
    compose_yaml,
    expected_models,
    lock_json,
    lock_sha256,
    patch_remote_path,
    remote_paths,
    sha256_text,
    vllm_address,
    with_generated_header,
)
from components.vllm.caddyfile import caddyfile
from components.vllm.host_monitoring import host_monitoring
from components.vllm.host_scripts import (
    check_script,
    down_script,
    env_file_content,
    env_file_script,
    fetch_script,
    preflight_script,
    remote_command,
    up_script,
    verify_patches_script,
    verify_script,
)
from components.vllm.inputs import ModelLock, VllmRocmServerArgs

FETCH_TIMEOUT = "12h"
"""157 GiB over the network: far past pulumi-command's defaults."""


@dataclass(frozen=True)
class HostFile:
    """One file copied to the host (a `CopyToRemote` named `<name>-<resource>`)."""

    resource: str
    """The resource name's suffix."""
    remote_path: str
    """Where the file lands on the host."""
    text: str | None
    """The generated content, header included; None for a file copied as it is from `source`."""
    source: str | None = None
    """The local file copied as it is (a patch overlay); None for generated content."""
    mode: int | None = None
    """The file's mode on the host; None: as the SSH copy leaves it (the user's umask)."""
    after: tuple[str, ...] = ("preflight",)
    """Resource suffixes the copy runs after."""


@dataclass(frozen=True)
class SecretEnvFile:
    """The env file the `env-file` script writes from stdin: its key stays a Pulumi secret."""

    remote_path: str
    """Where the script writes it."""
    secret_input: Literal["api_key"]
    """The input whose (secret) value the file holds."""
    stack: str
    """The stack named in its generated-by header."""
    mode: int = 0o600
    """The mode the script gives it."""

    def content(self, secret: str) -> str:
        """The file's text once the secret is known (only inside a secret Output's apply)."""
        return env_file_content(secret, self.stack)


@dataclass(frozen=True)
class Timeouts:
    """pulumi-command custom timeouts of a remote command."""

    create: str | None = None
    update: str | None = None
    delete: str | None = None


@dataclass(frozen=True)
class HostCommand:
    """One remote command (a `remote.Command` named `<name>-<resource>`)."""

    resource: str
    """The resource name's suffix; `render` shows `script` as commands/NN-<name>-<resource>.sh."""
    script: str
    """The bash script it runs on create (and on update when `rerun_on_update`)."""
    after: tuple[str, ...] = ()
    """Resource suffixes the command runs after."""
    rerun_on_update: bool = False
    """Whether an update runs `script` again."""
    delete_script: str | None = None
    """The script run when the resource is deleted."""
    stdin: SecretEnvFile | None = None
    """The secret file fed to the script's stdin."""
    timeouts: Timeouts | None = None
    """Custom timeouts; None: pulumi-command's defaults."""
    delete_before_replace: bool = False
    """Whether a replacement first deletes the old one (same host, same project)."""

    @property
    def command(self) -> str:
        """What pulumi-command runs over SSH: the script, wrapped."""
        return remote_command(self.script)

    @property
    def delete_command(self) -> str | None:
        """The delete script, wrapped; None without one."""
        return None if self.delete_script is None else remote_command(self.delete_script)


@dataclass(frozen=True)
class HostBundle:
    """Every file and command of the host, in an order where each comes after its `after`."""

    steps: tuple[HostFile | HostCommand, ...]

    @property
    def files(self) -> dict[str, HostFile]:
        """The copied files by resource suffix."""
        return {s.resource: s for s in self.steps if isinstance(s, HostFile)}

    @property
    def commands(self) -> dict[str, HostCommand]:
        """The remote commands by resource suffix."""
        return {s.resource: s for s in self.steps if isinstance(s, HostCommand)}


def lock_document(lock: ModelLock) -> dict[str, Any]:
    """The lock as the host's fetcher reads it (the fetcher's own format)."""
    document = fetch_document(lock["repo"], lock["revision"], lock["files"])
    if "unresolved_patterns" in lock:
        document["unresolved_patterns"] = list(lock["unresolved_patterns"])
    return document


def deploy_files(args: VllmRocmServerArgs, stack: str) -> list[HostFile]:
    """The files compose runs from (compose, Caddyfile, lock, fetcher, monitoring), each with
    the generated-by header of `stack` where its format has comments."""
    flags, metrics = args["flags"], args.get("metrics")
    monitoring = (
        host_monitoring(args["base_dir"], args["caddy"], flags, args.get("min_decode_tps"), metrics)
        if metrics is not None
        else None
    )
    site = monitoring.site if monitoring is not None else None
    caddy_text = caddyfile(
        args["caddy"],
        upstream=vllm_address(flags),
        metrics=site,
        max_model_len=flags["max_model_len"],
    )
    paths = remote_paths(args["base_dir"])
    lock = lock_document(args["model_lock"])
    compose = compose_file(
        image=args["image"],
        flags=flags,
        model_dir=args["model_dir"],
        paths=paths,
        patches=args["patches"],
        caddy=args["caddy"],
        caddyfile_sha256=sha256_text(caddy_text),
        lock_sha256=lock_sha256(lock),
        startup_seconds=args["startup_timeout_seconds"],
        metrics=site,
        gpu_exporter=monitoring.gpu_exporter if monitoring is not None else None,
        extra_args=args.get("extra_args") or (),
    )
    files = {
        "compose": (paths["compose"], compose_yaml(compose)),
        "caddyfile": (paths["caddyfile"], caddy_text),
        "lock": (paths["lock"], lock_json(lock)),
        "fetcher": (paths["fetcher"], FETCHER_SOURCE.read_text()),
        "http-policy": (paths["http_policy"], HTTP_POLICY_SOURCE.read_text()),
        **(monitoring.files if monitoring is not None else {}),
    }
    return [
        HostFile(suffix, path, with_generated_header(path, text, stack))
        for suffix, (path, text) in files.items()
    ]


def verify_files(base_dir: str, expectations: str, expected: str, stack: str) -> list[HostFile]:
    """verify.py, its imports, the recorded answers and the expected /v1/models (`expected`),
    under verify/."""
    verify_dir = posixpath.join(base_dir, "verify")
    files = (
        ("script", "verify.py", VERIFY_SOURCE.read_text()),
        ("http-policy", HTTP_POLICY_FILE, HTTP_POLICY_SOURCE.read_text()),
        ("props-check", PROPS_FILE, PROPS_SOURCE.read_text()),
        ("expectations", "expect.json", expectations),
        ("props", EXPECTED_PROPS_FILE, expected),
    )
    return [
        HostFile(f"verify-{suffix}", path, with_generated_header(path, text, stack))
        for suffix, name, text in files
        for path in (f"{verify_dir}/{name}",)
    ]


def host_bundle(args: VllmRocmServerArgs, stack: str) -> HostBundle:
    """Every file and script the host gets from these validated inputs, for stack `stack`."""
    base_dir, project, flags = args["base_dir"], args["project_name"], args["flags"]
    model_dir, startup = args["model_dir"], args["startup_timeout_seconds"]
    paths = remote_paths(base_dir)
    files = deploy_files(args, stack)
    text = {f.resource: f.text or "" for f in files}
    patches = [
        HostFile(f"patch-{index}", patch_remote_path(paths, patch), None, source=patch["source"])
        for index, patch in enumerate(args["patches"])
    ]
    preflight = HostCommand(
        "preflight",
        preflight_script(base_dir=base_dir, model_dir=model_dir, requirements=args["requirements"]),
    )
    verify_patches = HostCommand(
        "verify-patches",
        verify_patches_script(paths, args["patches"]),
        after=tuple(p.resource for p in patches),
    )
    fetch = HostCommand(
        "fetch",
        fetch_script(
            paths=paths,
            model_dir=model_dir,
            fetch_image=args["fetch_image"],
            lock_sha256=sha256_text(text["lock"]),
            fetcher_sha256=sha256_text(text["fetcher"] + text["http-policy"]),
            parallel=args["fetch_parallel"],
        ),
        after=("lock", "fetcher", "http-policy"),
        timeouts=Timeouts(create=FETCH_TIMEOUT, update=FETCH_TIMEOUT),
    )
    env_file = HostCommand(
        "env-file",
        env_file_script(paths, project),
        after=("compose",),
        stdin=SecretEnvFile(paths["env_file"], "api_key", stack),
    )
    wait = f"{startup + 600}s"
    up = HostCommand(
        "up",
        up_script(paths, project, sha256_text(text["compose"]), startup),
        after=("fetch", "verify-patches", "env-file", *text),
        rerun_on_update=True,
        delete_script=down_script(paths, project, model_dir),
        timeouts=Timeouts(create=wait, update=wait, delete="10m"),
        # A replacement on the same host must stop the old project before starting anew.
        delete_before_replace=True,
    )
    up_sha256 = sha256_text(up.command)
    caddy = args["caddy"]
    check = HostCommand(
        "check",
        check_script(
            paths, project, caddy, flags["port"], flags["served_model_name"], up_sha256=up_sha256
        ),
        after=("up",),
    )
    steps: list[HostFile | HostCommand] = [
        preflight,
        *files,
        *patches,
        verify_patches,
        fetch,
        env_file,
        up,
        check,
    ]
    expectations = args.get("verify_expectations")
    if expectations is not None:
        # What /v1/models must say: from the flags the vllm serve argv is made of.
        expected = props_text(expected_models(flags))
        checked = verify_files(base_dir, expectations, expected, stack)
        script = verify_script(
            base_dir,
            project,
            args["fetch_image"],
            vllm_address(flags),
            sha256_text(expectations + expected),
            args.get("min_decode_tps"),
            up_sha256=up_sha256,
        )
        # After the check, and again whenever up changed: a failed check fails `pulumi up`.
        verify = HostCommand("verify", script, after=("check", *(f.resource for f in checked)))
        steps += [*checked, verify]
    return HostBundle(tuple(steps))
