"""The policy pack's Caddy rule, which reads a Caddyfile as the real `caddy adapt` does: both
stacks' real renders pass every policy, and each crafted Caddyfile that lets a request past the
allowlist fails."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from policy import validators
from tests.support.policy import Render, caddy_messages, edited, messages, policy_args, run_policy


@pytest.mark.parametrize("stack", ["strix-halo", "mi300x"])
def test_real_render_passes_every_policy_and_says_what_it_checked(
    render_dirs: dict[str, Path], stack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert validators.check_render(render_dirs[stack]) == []
    assert validators.main([str(render_dirs[stack])]) == 0
    resources, files = validators.load_render(render_dirs[stack])
    assert capsys.readouterr().out == (
        f"{render_dirs[stack]}: {len(resources)} resources and {len(files)} host files checked "
        f"against 5 policies ({', '.join(validators.POLICY_NAMES)}): no violations\n"
    )
    assert len(resources) > 5 and (stack != "mi300x" or len(files) > 3)


@pytest.mark.parametrize(
    "world", ["0.0.0.0/0 ::/0", "0.0.0.0/1 128.0.0.0/1", "::/1 8000::/1", "0.0.0.0/0"]
)
def test_caddy_allowlist_open_to_the_world_fails_unless_allowed(
    mi300x_render: Render, world: str
) -> None:
    resources, files = mi300x_render
    edited(files, "/opt/llm/Caddyfile", "198.51.100.0/24", world)
    (message,) = messages(resources, files)
    assert message.startswith("[caddy-allowlist] vllm-caddyfile: /opt/llm/Caddyfile: the allowlist")
    assert "together admits every address, i.e. the whole internet" in message
    assert messages(resources, files, allow_world=True) == []


def test_caddy_allowlist_of_large_networks_passes(mi300x_render: Render) -> None:
    resources, files = mi300x_render
    edited(files, "/opt/llm/Caddyfile", "198.51.100.0/24", "0.0.0.0/1 10.0.0.0/8 ::/1")
    assert messages(resources, files) == []


def test_caddyfile_without_an_allowlist_fails(mi300x_render: Render) -> None:
    resources, files = mi300x_render
    lines = files["/opt/llm/Caddyfile"].splitlines()
    files["/opt/llm/Caddyfile"] = "\n".join(
        line for line in lines if "remote_ip" not in line and "@denied" not in line
    )
    assert any("no remote_ip/client_ip allowlist" in m for m in messages(resources, files))


def test_pack_reads_caddyfile_from_the_copied_asset_and_honours_allow_world(
    mi300x_render: Render,
) -> None:
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"].replace("198.51.100.0/24", "0.0.0.0/0")
    props = {"remotePath": "/opt/llm/Caddyfile", "source": pulumi.StringAsset(caddyfile)}
    args = policy_args("command:remote:CopyToRemote", props)
    assert run_policy("caddy-allowlist", args) == [
        "/opt/llm/Caddyfile: the allowlist 0.0.0.0/0 127.0.0.1/32 ::1/128 together admits "
        "every address, i.e. the whole internet (set allowWorld in the policy config if that "
        "is intended)"
    ]
    allowed = policy_args("command:remote:CopyToRemote", props, allowWorld=True)
    assert run_policy("caddy-allowlist", allowed) == []


def test_each_caddy_site_has_its_own_allowlist(mi300x_render: Render) -> None:
    # The metrics site opened to everyone is reported although the API site is narrow.
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"].replace("192.0.2.0/24", "0.0.0.0/0 ::/0")
    props = {"remotePath": "/opt/llm/Caddyfile", "source": pulumi.StringAsset(caddyfile)}
    assert run_policy("caddy-allowlist", policy_args("command:remote:CopyToRemote", props)) == [
        "/opt/llm/Caddyfile: the allowlist 0.0.0.0/0 ::/0 together admits every address, i.e. "
        "the whole internet (set allowWorld in the policy config if that is intended)"
    ]
    # Two halves of the address space on two sites are two narrow allowlists, not one open one.
    halves = (
        mi300x_render[1]["/opt/llm/Caddyfile"]
        .replace("198.51.100.0/24", "0.0.0.0/1 ::/1")
        .replace("192.0.2.0/24", "128.0.0.0/1 8000::/1")
    )
    props = {"remotePath": "/opt/llm/Caddyfile", "source": pulumi.StringAsset(halves)}
    assert run_policy("caddy-allowlist", policy_args("command:remote:CopyToRemote", props)) == []


def test_an_inverted_allowlist_is_a_denylist_and_fails(mi300x_render: Render) -> None:
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"].replace(
        "@denied not remote_ip 198.51.100.0/24", "@denied remote_ip 198.51.100.0/24"
    )
    (message,) = caddy_messages(mi300x_render, caddyfile)
    assert "site llm.example.com on :443" in message
    assert "a denylist (remote_ip without not)" in message


def test_an_extra_site_without_an_allowlist_fails(mi300x_render: Render) -> None:
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"] + (
        "\nbackdoor.example.com {\n\treverse_proxy vllm:8000\n}\n"
    )
    (message,) = caddy_messages(mi300x_render, caddyfile)
    assert "site backdoor.example.com on :443: no remote_ip/client_ip allowlist" in message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # A `route` block is kept in place by Caddy: it runs before the allowlist's respond.
        ("\t# remote_ip is the TCP peer",
         "\troute /v1/* {\n\t\treverse_proxy vllm:8000\n\t}\n\t# remote_ip is the TCP peer"),
        # Written after the allowlist, but Caddy orders `handle` before `respond`: it runs first.
        ('respond @not_api "Not Found" 404',
         'respond @not_api "Not Found" 404\n\thandle /v1/* {\n\t\treverse_proxy vllm:8000\n\t}'),
    ],
    ids=["route-injected-ahead", "handle-block-injected-after"],
)  # fmt: skip
def test_a_route_or_handle_block_injected_runs_ahead_of_the_allowlist_and_fails(
    mi300x_render: Render, old: str, new: str
) -> None:
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"].replace(old, new)
    (message,) = caddy_messages(mi300x_render, caddyfile)
    assert "a route runs ahead of the allowlist" in message


def test_a_directive_caddy_orders_after_the_allowlist_passes(mi300x_render: Render) -> None:
    # Written first, but `reverse_proxy` sorts after `respond`: the allowlist still runs first.
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"].replace(
        "\t# remote_ip is the TCP peer",
        "\treverse_proxy /other/* vllm:8000\n\t# remote_ip is the TCP peer",
    )
    assert caddy_messages(mi300x_render, caddyfile) == []


def test_an_allowlist_that_does_not_refuse_fails(mi300x_render: Render) -> None:
    caddyfile = mi300x_render[1]["/opt/llm/Caddyfile"].replace(
        'respond @denied "Forbidden" 403', 'respond @denied "ok" 200', 1
    )
    (message,) = caddy_messages(mi300x_render, caddyfile)
    assert "an allowlist that does not answer 403" in message


def test_a_caddyfile_caddy_cannot_read_fails(mi300x_render: Render) -> None:
    (message,) = caddy_messages(mi300x_render, mi300x_render[1]["/opt/llm/Caddyfile"] + "\n}\n")
    assert "caddy cannot read it" in message
