"""VllmRocmServer: vLLM (ROCm image) behind Caddy on one GPU host, over SSH with pulumi-command."""

import posixpath
import warnings
from typing import Any

import pulumi

with warnings.catch_warnings():
    # pulumi_command.remote warns at import about its deprecated CopyFile, which this component
    # does not use (it copies with CopyToRemote): a program importing it should not see that.
    warnings.filterwarnings("ignore", "This resource is deprecated", DeprecationWarning)
    from pulumi_command import remote

    # pulumi_command loads a module on first use: load `remote` while the filter holds.
    remote.CopyToRemote  # noqa: B018

from components.k8s.children import after, inherited_dependencies
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
from components.validation import checked_inputs
from components.vllm.builders import (
    RemotePaths,
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
from components.vllm.caddyfile import base_url, caddyfile
from components.vllm.host_monitoring import (
    GPU_EXPORTER_SERVICE,
    gpu_exporter_service,
    metrics_site,
    monitoring_files,
    monitoring_spec,
)
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
from components.vllm.inputs import (
    ModelLock,
    SshConnection,
    VllmRocmServerArgs,
)

TYPE_TOKEN = "llm-infra:index:VllmRocmServer"


class VllmRocmServer(pulumi.ComponentResource):
    """vLLM ROCm and Caddy in Docker compose on an SSH host: preflight, fetch, up, check."""

    url: pulumi.Output[str]
    """Public HTTPS base URL (append `/v1` for the OpenAI API); known once the check passed."""
    served_model_name: pulumi.Output[str]
    """The model id in `/v1/models`."""

    def __init__(
        self, name: str, args: VllmRocmServerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        args = checked_inputs("VllmRocmServer", name, args, VllmRocmServerArgs)
        super().__init__(TYPE_TOKEN, name, None, opts)
        base_dir = args["base_dir"]
        project = args["project_name"]
        patches = args["patches"]
        flags = args["flags"]
        startup = args["startup_timeout_seconds"]
        paths = remote_paths(base_dir)
        stack = pulumi.get_stack()
        files = rendered_files(args, paths, stack)
        connection = ssh_connection(args["connection"])
        inherited = inherited_dependencies(opts)

        def child(*depends: pulumi.Resource, **extra: Any) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=[*inherited, *depends], **extra)

        self.preflight = remote.Command(
            f"{name}-preflight",
            connection=connection,
            create=remote_command(
                preflight_script(
                    base_dir=base_dir,
                    model_dir=args["model_dir"],
                    requirements=args["requirements"],
                )
            ),
            opts=child(),
        )
        copies: dict[str, remote.CopyToRemote] = {}
        for suffix, (remote_path, text) in files.items():
            copies[suffix] = remote.CopyToRemote(
                f"{name}-{suffix}",
                connection=connection,
                source=pulumi.StringAsset(text),
                remote_path=remote_path,
                opts=child(self.preflight),
            )
        patch_copies = [
            remote.CopyToRemote(
                f"{name}-patch-{index}",
                connection=connection,
                source=pulumi.FileAsset(patch["source"]),
                remote_path=patch_remote_path(paths, patch),
                opts=child(self.preflight),
            )
            for index, patch in enumerate(patches)
        ]
        self.verify_patches = remote.Command(
            f"{name}-verify-patches",
            connection=connection,
            create=remote_command(verify_patches_script(paths, patches)),
            opts=child(*patch_copies),
        )
        lock_text = files["lock"][1]
        self.fetch = remote.Command(
            f"{name}-fetch",
            connection=connection,
            create=remote_command(
                fetch_script(
                    paths=paths,
                    model_dir=args["model_dir"],
                    fetch_image=args["fetch_image"],
                    lock_sha256=sha256_text(lock_text),
                    fetcher_sha256=sha256_text(files["fetcher"][1] + files["http-policy"][1]),
                    parallel=args["fetch_parallel"],
                )
            ),
            # 157 GiB over the network: far past pulumi-command's defaults.
            opts=child(
                copies["lock"],
                copies["fetcher"],
                copies["http-policy"],
                custom_timeouts=pulumi.CustomTimeouts(create="12h", update="12h"),
            ),
        )
        self.env_file = remote.Command(
            f"{name}-env-file",
            connection=connection,
            create=remote_command(env_file_script(paths, project)),
            stdin=pulumi.Output.secret(args["api_key"]).apply(
                lambda key: env_file_content(key, stack)
            ),
            opts=child(copies["compose"]),
        )
        compose_text = files["compose"][1]
        up = remote_command(up_script(paths, project, sha256_text(compose_text), startup))
        self.up = remote.Command(
            f"{name}-up",
            connection=connection,
            create=up,
            update=up,
            delete=remote_command(down_script(paths, project, args["model_dir"])),
            opts=child(
                self.fetch,
                self.verify_patches,
                self.env_file,
                *copies.values(),
                # A replacement on the same host must stop the old project before starting anew.
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=f"{startup + 600}s", update=f"{startup + 600}s", delete="10m"
                ),
            ),
        )
        check = remote_command(
            check_script(
                paths,
                project,
                args["caddy"],
                flags["port"],
                flags["served_model_name"],
                up_sha256=sha256_text(up),
            )
        )
        self.check = remote.Command(
            f"{name}-check", connection=connection, create=check, opts=child(self.up)
        )
        expectations = args.get("verify_expectations")
        self.verify: remote.Command | None = None
        """The recorded-answers check after up; None without verify_expectations."""
        if expectations is not None:
            verify_dir = posixpath.join(base_dir, "verify")
            expected = props_text(expected_models(flags))
            verify_copies = [
                remote.CopyToRemote(
                    f"{name}-verify-{suffix}",
                    connection=connection,
                    source=pulumi.StringAsset(with_generated_header(remote_path, text, stack)),
                    remote_path=remote_path,
                    opts=child(self.preflight),
                )
                for suffix, remote_path, text in (
                    ("script", f"{verify_dir}/verify.py", VERIFY_SOURCE.read_text()),
                    (
                        "http-policy",
                        f"{verify_dir}/{HTTP_POLICY_FILE}",
                        HTTP_POLICY_SOURCE.read_text(),
                    ),
                    ("props-check", f"{verify_dir}/{PROPS_FILE}", PROPS_SOURCE.read_text()),
                    ("expectations", f"{verify_dir}/expect.json", expectations),
                    # What /v1/models must say: from the flags the vllm serve argv is made of.
                    ("props", f"{verify_dir}/{EXPECTED_PROPS_FILE}", expected),
                )
            ]
            verify = remote_command(
                verify_script(
                    base_dir,
                    project,
                    args["fetch_image"],
                    vllm_address(flags),
                    sha256_text(expectations + expected),
                    args.get("min_decode_tps"),
                    up_sha256=sha256_text(up),
                )
            )
            self.verify = remote.Command(
                f"{name}-verify",
                connection=connection,
                # After the check, and again whenever up changed: a failed check fails `pulumi up`.
                create=verify,
                opts=child(self.check, *verify_copies),
            )
        self.url = after(self.check, base_url(args["caddy"]))
        self.served_model_name = after(self.check, flags["served_model_name"])
        self.register_outputs({"url": self.url, "served_model_name": self.served_model_name})


def ssh_connection(connection: pulumi.Input[SshConnection]) -> pulumi.Output[remote.ConnectionArgs]:
    """pulumi-command connection args, the private key always a secret."""

    def connection_args(known: SshConnection) -> remote.ConnectionArgs:
        return remote.ConnectionArgs(
            host=known["host"],
            user=known["user"],
            port=known["port"],
            private_key=pulumi.Output.secret(known["private_key"]),
            host_key=known.get("host_key"),
        )

    return pulumi.Output.from_input(connection).apply(connection_args)


def lock_document(lock: ModelLock) -> dict[str, Any]:
    """The lock as the host's fetcher reads it (the fetcher's own format)."""
    document = fetch_document(lock["repo"], lock["revision"], lock["files"])
    if "unresolved_patterns" in lock:
        document["unresolved_patterns"] = list(lock["unresolved_patterns"])
    return document


def rendered_files(
    args: VllmRocmServerArgs, paths: RemotePaths, stack: str
) -> dict[str, tuple[str, str]]:
    """Generated files by resource suffix: (remote path, content), each with the generated-by
    header of `stack` where its format has comments."""
    lock = lock_document(args["model_lock"])
    lock_text = lock_json(lock)
    monitoring = args.get("metrics")
    site = metrics_site(monitoring) if monitoring is not None else None
    caddy_text = caddyfile(args["caddy"], upstream=vllm_address(args["flags"]), metrics=site)
    exporter_image = monitoring.get("gpu_exporter_image") if monitoring is not None else None
    compose = compose_file(
        image=args["image"],
        flags=args["flags"],
        model_dir=args["model_dir"],
        paths=paths,
        patches=args["patches"],
        caddy=args["caddy"],
        caddyfile_sha256=sha256_text(caddy_text),
        lock_sha256=lock_sha256(lock),
        startup_seconds=args["startup_timeout_seconds"],
        metrics=site,
        gpu_exporter=(GPU_EXPORTER_SERVICE, gpu_exporter_service(exporter_image))
        if exporter_image
        else None,
        extra_args=args.get("extra_args") or (),
    )
    files = {
        "compose": (paths["compose"], compose_yaml(compose)),
        "caddyfile": (paths["caddyfile"], caddy_text),
        "lock": (paths["lock"], lock_text),
        "fetcher": (paths["fetcher"], FETCHER_SOURCE.read_text()),
        "http-policy": (paths["http_policy"], HTTP_POLICY_SOURCE.read_text()),
    }
    if monitoring is not None:
        flags = args["flags"]
        speculative = flags.get("speculative_config")
        spec = monitoring_spec(
            flags["served_model_name"],
            args.get("min_decode_tps"),
            speculative["num_speculative_tokens"] if speculative else None,
            monitoring,
        )
        base_dir = posixpath.dirname(paths["compose"])
        files.update(monitoring_files(base_dir, args["caddy"], monitoring, spec))
    return {
        suffix: (path, with_generated_header(path, text, stack))
        for suffix, (path, text) in files.items()
    }
