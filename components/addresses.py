"""Network address facts shared by the config checks and the policy pack."""

import ipaddress


def covers_every_address(cidrs: list[str]) -> bool:
    """True when the networks together admit every IPv4 or every IPv6 address (halves count)."""
    networks = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    return any(n.prefixlen == 0 for n in ipaddress.collapse_addresses(v4)) or any(
        n.prefixlen == 0 for n in ipaddress.collapse_addresses(v6)
    )
