"""VllmRocmServer: vLLM (ROCm image) behind Caddy on one GPU host, over SSH with pulumi-command."""

import warnings

import pulumi

with warnings.catch_warnings():
    # pulumi_command.remote warns at import about its deprecated CopyFile, which this component
    # does not use (it copies with CopyToRemote): a program importing it should not see that.
    warnings.filterwarnings("ignore", "This resource is deprecated", DeprecationWarning)
    from pulumi_command import remote

    # pulumi_command loads a module on first use: load `remote` while the filter holds.
    remote.CopyToRemote  # noqa: B018

from components.k8s.children import after, inherited_dependencies
from components.validation import checked_inputs
from components.vllm.bundle import HostBundle, HostCommand, HostFile, host_bundle
from components.vllm.caddyfile import base_url
from components.vllm.inputs import SshConnection, VllmRocmServerArgs

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
        stack = pulumi.get_stack()
        bundle = host_bundle(args, stack)
        made = host_resources(
            name,
            bundle,
            args,
            ssh_connection(args["connection"]),
            self,
            inherited_dependencies(opts),
        )
        self.preflight = command(made, "preflight")
        self.verify_patches = command(made, "verify-patches")
        self.fetch = command(made, "fetch")
        self.env_file = command(made, "env-file")
        self.up = command(made, "up")
        self.check = command(made, "check")
        self.verify: remote.Command | None = (
            command(made, "verify") if "verify" in bundle.commands else None
        )
        """The recorded-answers check after up; None without verify_expectations."""
        flags = args["flags"]
        self.url = after(self.check, base_url(args["caddy"]))
        self.served_model_name = after(self.check, flags["served_model_name"])
        self.register_outputs({"url": self.url, "served_model_name": self.served_model_name})


def host_resources(
    name: str,
    bundle: HostBundle,
    args: VllmRocmServerArgs,
    connection: pulumi.Output[remote.ConnectionArgs],
    parent: pulumi.Resource,
    inherited: list[pulumi.Resource],
) -> dict[str, pulumi.Resource]:
    """The bundle as pulumi-command resources, by resource suffix, in one pass over its steps."""
    made: dict[str, pulumi.Resource] = {}
    for step in bundle.steps:
        opts = pulumi.ResourceOptions(
            parent=parent, depends_on=[*inherited, *(made[suffix] for suffix in step.after)]
        )
        if isinstance(step, HostCommand):
            opts.delete_before_replace = step.delete_before_replace or None
            if step.timeouts is not None:
                opts.custom_timeouts = pulumi.CustomTimeouts(
                    create=step.timeouts.create,
                    update=step.timeouts.update,
                    delete=step.timeouts.delete,
                )
        if isinstance(step, HostFile):
            made[step.resource] = copy_resource(f"{name}-{step.resource}", step, connection, opts)
        else:
            made[step.resource] = command_resource(
                f"{name}-{step.resource}", step, args, connection, opts
            )
    return made


def copy_resource(
    name: str,
    step: HostFile,
    connection: pulumi.Output[remote.ConnectionArgs],
    opts: pulumi.ResourceOptions,
) -> remote.CopyToRemote:
    """One host file: its generated text, or a local file copied as it is."""
    source: pulumi.Asset
    if step.source is not None:
        source = pulumi.FileAsset(step.source)
    else:
        source = pulumi.StringAsset(step.text or "")
    return remote.CopyToRemote(
        name, connection=connection, source=source, remote_path=step.remote_path, opts=opts
    )


def command_resource(
    name: str,
    step: HostCommand,
    args: VllmRocmServerArgs,
    connection: pulumi.Output[remote.ConnectionArgs],
    opts: pulumi.ResourceOptions,
) -> remote.Command:
    """One remote command; its stdin secret, if any, resolved only inside a secret Output."""
    stdin = None
    if step.stdin is not None:
        secret = args[step.stdin.secret_input]
        stdin = pulumi.Output.secret(secret).apply(step.stdin.content)
    return remote.Command(
        name,
        connection=connection,
        create=step.command,
        update=step.command if step.rerun_on_update else None,
        delete=step.delete_command,
        stdin=stdin,
        opts=opts,
    )


def command(made: dict[str, pulumi.Resource], suffix: str) -> remote.Command:
    """The remote command of `suffix` among the made resources."""
    resource = made[suffix]
    assert isinstance(resource, remote.Command)
    return resource


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
