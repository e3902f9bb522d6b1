"""A stack's secrets: which it needs, what is wrong with their values (never quoting them),
and the Outputs they reach the program as."""

from __future__ import annotations

import pulumi
from pydantic import BaseModel, ConfigDict

from components.payloads.fetcher import token_over_http_problem
from infra.config.base import SECRET_PLACEHOLDER
from infra.config.docker_host import DockerHostStack
from infra.config.fleet import FleetStack
from infra.config.kubernetes import KubernetesStack


class StackSecrets(BaseModel):
    """Secret config values, as Outputs (never plain values in the config model)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    hf_token: pulumi.Output[str] | None
    api_key: pulumi.Output[str] | None
    ssh_private_key: pulumi.Output[str] | None = None


def missing_secrets(
    stack: KubernetesStack | FleetStack | DockerHostStack, present: set[str]
) -> tuple[list[str], list[str]]:
    """Secrets the stack needs but the config lacks: (always errors, errors only for `up`).

    A secret cannot live in a committed stack file, and `llm-infra render` needs no Pulumi CLI
    to set one: a preview or render shows the stack with the placeholder `[secret]` where the
    value goes (a warning names the key) and `pulumi up` refuses, whether the target needs the
    secret (the MI300X host's SSH key and API key) or a feature does (`server.apiKey: true`).
    """
    feature: dict[str, str] = {}  # none today: every missing secret is refused by `up` only
    target: dict[str, str] = {}
    if isinstance(stack, DockerHostStack):
        target["sshPrivateKey"] = "the SSH key pulumi-command logs in to the host with"
        target["apiKey"] = "the API key clients send to the public endpoint"
    else:
        servers = stack.servers if isinstance(stack, FleetStack) else [stack.server]
        keyed = [s for s in servers if s.api_key]
        if keyed:
            where = "server" if isinstance(stack, KubernetesStack) else "a server's"
            target["apiKey"] = f"{where}.apiKey is true"

    def lines(needed: dict[str, str]) -> list[str]:
        return [
            f"{key}: required ({why}): pulumi config set --secret {key} ..."
            for key, why in needed.items()
            if key not in present
        ]

    return lines(feature), lines(target)


def token_transport_problems(
    stack: KubernetesStack | FleetStack | DockerHostStack, has_token: bool
) -> list[str]:
    """A plain-http store.hfEndpoint that the HF token would be sent to, not stated."""
    if isinstance(stack, DockerHostStack):
        return []
    entries = (
        [(f"servers[{i}].store", s.store) for i, s in enumerate(stack.servers)]
        if isinstance(stack, FleetStack)
        else [("store", stack.store)]
    )
    problems = []
    for key, store in entries:
        endpoint = str(store.hf_endpoint) if store.hf_endpoint else None
        problem = token_over_http_problem(endpoint, has_token, store.allow_token_over_http)
        if problem:
            problems.append(f"{key}.hfEndpoint: {problem}")
    return problems


def plaintext_secret_problem(key: str, where: str) -> str:
    """A secret written in plain text: the line to use instead (never the value)."""
    return (
        f"{key}: a secret in plain text in {where}; remove it and run: "
        f"pulumi config set --secret {key} ..."
    )


def secret_problems(key: str, value: object) -> list[str]:
    """What is wrong with a secret's value, never quoting it (one line naming the key)."""
    if value is None or value == SECRET_PLACEHOLDER:
        return []
    how = f"set it again: pulumi config set --secret {key} ..."
    if not isinstance(value, str) or not value.strip():
        return [f"{key}: empty ({how})"]
    text = value.strip()
    if key == "sshPrivateKey":
        if "PRIVATE KEY-----" not in text or any(ord(c) < 32 and c != "\n" for c in text):
            return [f"{key}: not a PEM or OpenSSH private key ({how} < ~/.ssh/id_ed25519)"]
        return []
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 or c in "'\"\\" for c in text):
        return [f"{key}: contains whitespace, quotes or control characters inside ({how})"]
    return []


def secret_output(value: str | None, keep_final_newline: bool = False) -> pulumi.Output[str] | None:
    """A secret config value as a secret Output (None when unset)."""
    # Stripped of the newline a shell or a file adds; an OpenSSH key must end in one.
    if value is None:
        return None
    text = value.strip() + ("\n" if keep_final_newline and value != SECRET_PLACEHOLDER else "")
    return pulumi.Output.secret(text)
