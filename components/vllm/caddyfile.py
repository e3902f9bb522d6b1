"""The Caddyfile of the MI300X host: HTTPS site, client allowlist, streaming reverse proxy."""

import ipaddress
from typing import Annotated, NotRequired, TypedDict

from pydantic import Field

from components.grammars import Cidr, Port
from components.monitoring.queries import METRICS_PATH
from components.vllm.inputs import CaddySite

# Processes inside the Caddy container reach it over its own loopback, which no outside packet
# can claim as its source: the deploy's final check uses it, the allowlist lets it through.
CONTAINER_LOOPBACK = ("127.0.0.1/32", "::1/128")
# What API clients need of vLLM. Everything else (/metrics, /invocations, /tokenize, /pooling,
# ...) is 404 at Caddy: vLLM checks the API key only under /v1 and a few other prefixes.
CLIENT_PATHS = ("/v1/*", "/health")


class MetricsSite(TypedDict):
    """The second site: vLLM's /metrics (and the GPU exporter's) for the monitoring network only."""

    port: Port
    """HTTPS port of the site on the host."""
    allowed_cidrs: Annotated[list[Cidr], Field(min_length=1)]
    """Networks allowed to scrape; everything else gets 403."""
    gpu_upstream: NotRequired[str | None]
    """`host:port` of AMD's device metrics exporter, served at /gpu/metrics (None: no GPU)."""


GPU_METRICS_PATH = "/gpu/metrics"
"""Where the metrics site serves the GPU exporter's /metrics."""


def token_count_label(tokens: int) -> str:
    """A context length as people write it: `256k` for 262144, the number when not whole k."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def site_is_ip(site: str) -> bool:
    """True when the site address is an IP address rather than a DNS name."""
    try:
        ipaddress.ip_address(site)
    except ValueError:
        return False
    return True


def caddyfile(
    caddy: CaddySite,
    *,
    upstream: str,
    http_port: int = 80,
    https_port: int = 443,
    metrics: MetricsSite | None = None,
    max_model_len: int | None = None,
) -> str:
    """The Caddyfile: HTTPS site, IP allowlist (403), no /metrics, streaming reverse proxy; and
    optionally a second site that serves /metrics to the monitoring network only
    (`max_model_len`: the server's `--max-model-len`, which the proxy's timeouts allow for)."""
    longest = "A long" if max_model_len is None else f"A {token_count_label(max_model_len)}-token"
    cidrs = caddy["allowed_cidrs"]
    site = caddy["site"]
    globals_ = ["\tadmin off"]
    if caddy["tls"] == "auto":
        globals_.append(f"\temail {caddy.get('acme_email')}")
    else:
        # Never touch a trust store: clients pin or skip the internal root themselves.
        globals_.append("\tskip_install_trust")
    if http_port != 80:
        globals_.append(f"\thttp_port {http_port}")
    if https_port != 443:
        globals_.append(f"\thttps_port {https_port}")
    # A client without SNI (the in-container check over 127.0.0.1) still gets the site's cert.
    globals_.append(f"\tdefault_sni {site}")
    globals_ += [
        "\tservers {",
        "\t\ttimeouts {",
        "\t\t\tread_body 10m",
        "\t\t\tread_header 1m",
        "\t\t\tidle 10m",
        "\t\t}",
        "\t}",
    ]
    allowed = " ".join([*cidrs, *CONTAINER_LOOPBACK])
    site_address = site if https_port == 443 else f"{site}:{https_port}"
    lines = [
        "{",
        *globals_,
        "}",
        "",
        f"{site_address} {{",
    ]
    if caddy["tls"] == "internal":
        lines.append("\ttls internal")
    lines += [
        "\t# remote_ip is the TCP peer: X-Forwarded-For cannot widen the allowlist.",
        f"\t@denied not remote_ip {allowed}",
        '\trespond @denied "Forbidden" 403',
        f"\t@not_api not path {' '.join(CLIENT_PATHS)}",
        '\trespond @not_api "Not Found" 404',
        f"\treverse_proxy {upstream} {{",
        "\t\t# Server-sent events reach the client as vLLM writes them.",
        "\t\tflush_interval -1",
        "\t\ttransport http {",
        "\t\t\tdial_timeout 10s",
        f"\t\t\t# {longest} prompt is minutes of prefill before the first byte.",
        "\t\t\tresponse_header_timeout 30m",
        "\t\t\tread_timeout 30m",
        "\t\t\twrite_timeout 30m",
        "\t\t}",
        "\t}",
        "}",
    ]
    if metrics is not None:
        lines += ["", *_metrics_site(caddy, metrics, upstream)]
    return "\n".join(lines) + "\n"


def _metrics_site(caddy: CaddySite, metrics: MetricsSite, upstream: str) -> list[str]:
    # Its own port and allowlist; the certificate is the API site's (same name, same TLS mode).
    gpu = metrics.get("gpu_upstream")
    paths = [METRICS_PATH, *([GPU_METRICS_PATH] if gpu else [])]
    lines = [f"{caddy['site']}:{metrics['port']} {{"]
    if caddy["tls"] == "internal":
        lines.append("\ttls internal")
    lines += [
        f"\t@denied not remote_ip {' '.join(metrics['allowed_cidrs'])}",
        '\trespond @denied "Forbidden" 403',
        f"\t@other not path {' '.join(paths)}",
        '\trespond @other "Not Found" 404',
        f"\t@vllm path {METRICS_PATH}",
        f"\treverse_proxy @vllm {upstream}",
    ]
    if gpu:
        lines += [
            f"\t@gpu path {GPU_METRICS_PATH}",
            f"\treverse_proxy @gpu {gpu} {{",
            f"\t\trewrite {METRICS_PATH}",
            "\t}",
        ]
    return [*lines, "}"]


def base_url(caddy: CaddySite) -> str:
    """The public HTTPS base URL (without `/v1`)."""
    site = caddy["site"]
    host = f"[{site}]" if site_is_ip(site) and ":" in site else site
    return f"https://{host}"
