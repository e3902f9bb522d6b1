"""Pure builders of VllmRocmServer: vLLM argv, compose file, Caddyfile and the host scripts.

Everything here is a function of typed arguments (no Pulumi), so it is unit-tested directly
and the contract tests run the same strings through vLLM's parser, Caddy and shellcheck.
"""

import hashlib
import ipaddress
import json
import posixpath
import re
from typing import Any, Literal, NotRequired, TypedDict

import yaml

from components.fetcher import lock_digest
from components.images import parse_image

VLLM_SERVICE = "vllm"
CADDY_SERVICE = "caddy"
FETCHER_MOUNT = "/opt/llm-infra"
# Processes inside the Caddy container reach it over its own loopback, which no outside packet
# can claim as its source: the deploy's final check uses it, the allowlist lets it through.
CONTAINER_LOOPBACK = ("127.0.0.1/32", "::1/128")
# Paths of vLLM that are for operators on the host, never for API clients.
INTERNAL_PATHS = ("/metrics", "/metrics/*")
SCRIPT_END = "LLM_INFRA_SCRIPT"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
_PATH = re.compile(r"^/[A-Za-z0-9._/@+-]*$")

TlsMode = Literal["auto", "internal"]


class SpeculativeConfig(TypedDict):
    """`--speculative-config` JSON (vLLM 0.33 keys)."""

    method: str
    """Draft method, e.g. `dspark` (DeepSeek V4's own draft heads)."""
    num_speculative_tokens: int
    """Tokens drafted per step (the seed measured 7)."""


class VllmFlags(TypedDict):
    """`vllm serve` flags, one typed field per flag (vLLM 0.33 names in the docstrings)."""

    model: str
    """Positional MODEL: the model directory inside the container, e.g. `/models/<dir>`."""
    served_model_name: str
    """`--served-model-name`: the id in `/v1/models`; LiteLLM routes by it."""
    host: str
    """`--host`: bind address inside the container (`0.0.0.0`: Caddy reaches it by name)."""
    port: int
    """`--port`: listen port on the compose network (vLLM's default 8000)."""
    tensor_parallel_size: int
    """`-tp`: GPUs the model is split over."""
    max_model_len: int
    """`--max-model-len`: context length in tokens (262144 = 256k)."""
    max_num_batched_tokens: int
    """`--max-num-batched-tokens`: scheduler budget per step (the seed recommends 2048)."""
    kv_cache_memory_bytes: int
    """`--kv-cache-memory-bytes`: GPU KV cache size; overrides `--gpu-memory-utilization`."""
    kv_offloading_size_gib: float
    """`--kv-offloading-size`: CPU KV tier in GiB (pinned host RAM)."""
    kv_offloading_backend: str
    """`--kv-offloading-backend`."""
    enable_prefix_caching: bool
    """`--enable-prefix-caching` (or `--no-enable-prefix-caching`)."""
    speculative_config: NotRequired[SpeculativeConfig | None]
    """`--speculative-config`, rendered as compact JSON."""
    reasoning_parser: NotRequired[str | None]
    """`--reasoning-parser`, e.g. `deepseek_v4`."""
    tool_call_parser: NotRequired[str | None]
    """`--tool-call-parser`; also turns on `--enable-auto-tool-choice`."""
    max_num_seqs: NotRequired[int | None]
    """`--max-num-seqs`: concurrent sequences (vLLM's default when unset)."""
    kv_cache_dtype: NotRequired[str | None]
    """`--kv-cache-dtype` (for DeepSeek V4 any fp8 becomes `fp8_ds_mla`)."""


class PatchOverlay(TypedDict):
    """A patched file bind-mounted read-only over a file of the vLLM image."""

    source: str
    """Local path of the patched file (relative to the Pulumi project or absolute)."""
    target: str
    """Absolute path of the file it replaces inside the container."""
    sha256: str
    """sha256 of the file; the host verifies its copy and stops the deploy on a mismatch."""


class CaddySettings(TypedDict):
    """The HTTPS front door: site address, certificates and the client allowlist."""

    site: str
    """A DNS name (automatic HTTPS) or the host's IP address (internal TLS only)."""
    tls: str
    """`auto`: ACME certificates for the domain; `internal`: Caddy's own CA."""
    allowed_cidrs: list[str]
    """Client networks allowed through; everything else gets 403. Never empty."""
    image: str
    """A pinned Caddy 2.11 image (version tag or digest)."""
    acme_email: NotRequired[str | None]
    """ACME account email; required with `tls: auto`."""


class HostRequirements(TypedDict):
    """What the preflight demands of the host before anything is downloaded or started."""

    min_free_disk_gib: float
    """Free disk in the model directory's filesystem, counting what the model already uses."""
    min_ram_gib: float
    """Installed RAM (MemTotal): the CPU KV tier is pinned, so available RAM varies at run time."""


class RemotePaths(TypedDict):
    """Where the deployment's files live on the host."""

    compose: str
    """The compose file."""
    caddyfile: str
    """The Caddyfile, bind-mounted into Caddy."""
    lock: str
    """The model lock the fetcher reads."""
    fetcher: str
    """The fetcher's source."""
    env_file: str
    """The API key env file (mode 0600)."""
    patches_dir: str
    """Directory of the copied patch overlays."""


def sha256_text(text: str) -> str:
    """sha256 hex digest of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def remote_paths(base_dir: str) -> RemotePaths:
    """The host paths under base_dir."""
    check_path("base_dir", base_dir)
    return {
        "compose": posixpath.join(base_dir, "compose.yaml"),
        "caddyfile": posixpath.join(base_dir, "Caddyfile"),
        "lock": posixpath.join(base_dir, "model.lock.json"),
        "fetcher": posixpath.join(base_dir, "fetcher.py"),
        "env_file": posixpath.join(base_dir, "vllm.env"),
        "patches_dir": posixpath.join(base_dir, "patches"),
    }


def check_path(what: str, path: str) -> None:
    """Refuse a path that is not absolute or would need quoting in a script or compose file."""
    if not _PATH.match(path) or "/../" in f"{path}/" or (path.endswith("/") and path != "/"):
        raise ValueError(f"{what}: {path!r} must be an absolute path of [A-Za-z0-9._/@+-]")


def patch_remote_path(paths: RemotePaths, patch: PatchOverlay) -> str:
    """Host path of a patch copy, named by its hash so a new content is a new mount source."""
    if not _SHA256.match(patch["sha256"]):
        raise ValueError(f"patch {patch['source']}: sha256 must be 64 lowercase hex digits")
    check_path(f"patch {patch['source']} target", patch["target"])
    name = re.sub(r"[^A-Za-z0-9._-]", "_", posixpath.basename(patch["source"]))
    return posixpath.join(paths["patches_dir"], f"{patch['sha256'][:12]}-{name}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def vllm_serve_args(flags: VllmFlags) -> list[str]:
    """The full `vllm serve ...` argv (the API key is never here: it comes from the env file)."""
    argv = [
        "vllm",
        "serve",
        flags["model"],
        "--served-model-name",
        flags["served_model_name"],
        "--host",
        flags["host"],
        "--port",
        str(flags["port"]),
        "-tp",
        str(flags["tensor_parallel_size"]),
        "--max-model-len",
        str(flags["max_model_len"]),
        "--max-num-batched-tokens",
        str(flags["max_num_batched_tokens"]),
        "--kv-cache-memory-bytes",
        str(flags["kv_cache_memory_bytes"]),
        "--kv-offloading-size",
        _number(flags["kv_offloading_size_gib"]),
        "--kv-offloading-backend",
        flags["kv_offloading_backend"],
    ]
    if flags.get("max_num_seqs") is not None:
        argv += ["--max-num-seqs", str(flags.get("max_num_seqs"))]
    if flags.get("kv_cache_dtype"):
        argv += ["--kv-cache-dtype", str(flags.get("kv_cache_dtype"))]
    speculative = flags.get("speculative_config")
    if speculative:
        argv += ["--speculative-config", json.dumps(dict(speculative), separators=(",", ":"))]
    if flags.get("reasoning_parser"):
        argv += ["--reasoning-parser", str(flags.get("reasoning_parser"))]
    if flags.get("tool_call_parser"):
        argv += [
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            str(flags.get("tool_call_parser")),
        ]
    argv.append(
        "--enable-prefix-caching"
        if flags["enable_prefix_caching"]
        else "--no-enable-prefix-caching"
    )
    return argv


def compose_file(
    *,
    image: str,
    flags: VllmFlags,
    model_dir: str,
    paths: RemotePaths,
    patches: list[PatchOverlay],
    caddy: CaddySettings,
    caddyfile_sha256: str,
    lock_sha256: str,
    startup_seconds: int,
) -> dict[str, Any]:
    """The compose project: vLLM on the compose network only, Caddy publishing 80/443."""
    # The stack config demands a digest (unless allowed otherwise); a moving tag never passes.
    if not parse_image(image).pinned:
        raise ValueError(f"image {image!r}: the vLLM image must be pinned by digest (@sha256:...)")
    if not parse_image(caddy["image"]).pinned:
        raise ValueError(f"caddy.image {caddy['image']!r}: pin a version tag or a digest")
    check_path("model_dir", model_dir)
    check_path("flags.model", flags["model"])
    argv = vllm_serve_args(flags)
    volumes: list[dict[str, Any]] = [
        {"type": "bind", "source": model_dir, "target": flags["model"], "read_only": True}
    ]
    targets = [p["target"] for p in patches]
    if len(set(targets)) != len(targets):
        raise ValueError("patches: two overlays have the same target")
    for patch in patches:
        volumes.append(
            {
                "type": "bind",
                "source": patch_remote_path(paths, patch),
                "target": patch["target"],
                "read_only": True,
            }
        )
    health = f"http://127.0.0.1:{flags['port']}/health"
    vllm: dict[str, Any] = {
        "image": image,
        # Explicit, so the command below is right whatever entrypoint the pinned build has.
        "entrypoint": argv[:2],
        "command": argv[2:],
        "restart": "unless-stopped",
        "devices": ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"],
        "group_add": ["video"],
        "ipc": "host",
        "cap_add": ["SYS_PTRACE", "IPC_LOCK"],
        "security_opt": ["seccomp=unconfined"],
        # The CPU KV tier is pinned host memory.
        "ulimits": {"memlock": -1},
        "environment": {
            "VLLM_ROCM_USE_AITER": "1",
            # The weights are on the mounted volume; never reach for the hub at start.
            "HF_HUB_OFFLINE": "1",
        },
        "env_file": [paths["env_file"]],
        "volumes": volumes,
        "expose": [str(flags["port"])],
        "labels": {"llm-infra.model-lock-sha256": lock_sha256},
        "healthcheck": {
            # The image has python; a curl may not be there.
            "test": [
                "CMD",
                "python3",
                "-c",
                f"import urllib.request; urllib.request.urlopen('{health}', timeout=5)",
            ],
            "interval": "15s",
            "timeout": "10s",
            "retries": 3,
            # Loading 157 GiB and compiling kernels takes long; failures then do not count.
            "start_period": f"{startup_seconds}s",
        },
    }
    caddy_service: dict[str, Any] = {
        "image": caddy["image"],
        "restart": "unless-stopped",
        "ports": ["80:80", "443:443", "443:443/udp"],
        "volumes": [
            {
                "type": "bind",
                "source": paths["caddyfile"],
                "target": "/etc/caddy/Caddyfile",
                "read_only": True,
            },
            {"type": "volume", "source": "caddy-data", "target": "/data"},
            {"type": "volume", "source": "caddy-config", "target": "/config"},
        ],
        # Caddy does not watch its file: a new hash changes the service, so `up` recreates it.
        "labels": {"llm-infra.caddyfile-sha256": caddyfile_sha256},
        "depends_on": {VLLM_SERVICE: {"condition": "service_started"}},
    }
    return {
        "services": {VLLM_SERVICE: vllm, CADDY_SERVICE: caddy_service},
        # Certificates survive `down`, so a redeploy does not hit ACME rate limits.
        "volumes": {"caddy-data": {}, "caddy-config": {}},
    }


def compose_yaml(document: dict[str, Any]) -> str:
    """The compose document as YAML text, keys in the order written."""
    return yaml.safe_dump(document, sort_keys=False, width=100)


def site_is_ip(site: str) -> bool:
    """True when the site address is an IP address rather than a DNS name."""
    try:
        ipaddress.ip_address(site)
    except ValueError:
        return False
    return True


def check_caddy(caddy: CaddySettings) -> list[str]:
    """The allowlist as normalised CIDRs; raise ValueError on a setting Caddy would misuse."""
    site = caddy["site"]
    is_ip = site_is_ip(site)
    if not is_ip and not _DOMAIN.match(site):
        raise ValueError(f"caddy.site {site!r}: not a DNS name or an IP address")
    if caddy["tls"] == "auto":
        if is_ip:
            raise ValueError(f"caddy.tls: auto needs a domain; {site} is an IP (use internal)")
        email = caddy.get("acme_email")
        if not email or not re.match(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", email):
            raise ValueError("caddy.acme_email: a valid email is required with tls: auto")
    elif caddy["tls"] != "internal":
        raise ValueError(f"caddy.tls: {caddy['tls']!r} is not auto or internal")
    if not caddy["allowed_cidrs"]:
        raise ValueError("caddy.allowed_cidrs: empty (write 0.0.0.0/0 to allow everyone)")
    cidrs = []
    for cidr in caddy["allowed_cidrs"]:
        try:
            cidrs.append(str(ipaddress.ip_network(cidr, strict=True)))
        except ValueError as exc:
            raise ValueError(f"caddy.allowed_cidrs: {cidr!r}: {exc}") from exc
    return cidrs


def caddyfile(
    caddy: CaddySettings,
    *,
    upstream: str = f"{VLLM_SERVICE}:8000",
    http_port: int = 80,
    https_port: int = 443,
) -> str:
    """The Caddyfile: HTTPS site, IP allowlist (403), no /metrics, streaming reverse proxy."""
    cidrs = check_caddy(caddy)
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
        f"\t@internal path {' '.join(INTERNAL_PATHS)}",
        '\trespond @internal "Not Found" 404',
        f"\treverse_proxy {upstream} {{",
        "\t\t# Server-sent events reach the client as vLLM writes them.",
        "\t\tflush_interval -1",
        "\t\ttransport http {",
        "\t\t\tdial_timeout 10s",
        "\t\t\t# A 256k-token prompt is minutes of prefill before the first byte.",
        "\t\t\tresponse_header_timeout 30m",
        "\t\t\tread_timeout 30m",
        "\t\t\twrite_timeout 30m",
        "\t\t}",
        "\t}",
        "}",
    ]
    return "\n".join(lines) + "\n"


def base_url(caddy: CaddySettings) -> str:
    """The public HTTPS base URL (without `/v1`)."""
    site = caddy["site"]
    host = f"[{site}]" if site_is_ip(site) and ":" in site else site
    return f"https://{host}"


def remote_command(script: str) -> str:
    """A script as one SSH command: bash runs it whatever the login shell, stdin left alone."""
    if SCRIPT_END in script:
        raise ValueError(f"a script may not contain {SCRIPT_END}")
    return f"bash -c \"$(cat <<'{SCRIPT_END}'\n{script}{SCRIPT_END}\n)\"\n"


def _script(body: list[str]) -> str:
    return "\n".join(["#!/usr/bin/env bash", "set -euo pipefail", *body]) + "\n"


def preflight_script(
    *,
    base_dir: str,
    model_dir: str,
    requirements: HostRequirements,
    devices: tuple[str, str] = ("/dev/kfd", "/dev/dri"),
) -> str:
    """Host checks that report every problem with its numbers; creates only the directories."""
    check_path("model_dir", model_dir)
    check_path("base_dir", base_dir)
    kfd, dri = devices
    patches_dir = remote_paths(base_dir)["patches_dir"]
    disk_kib = int(requirements["min_free_disk_gib"] * 1024 * 1024)
    ram_kib = int(requirements["min_ram_gib"] * 1024 * 1024)
    return _script(
        [
            "problems=0",
            'problem() { echo "preflight: $*" >&2; problems=$((problems + 1)); }',
            'gib() { awk -v k="$1" \'BEGIN { printf "%.1f GiB", k / 1048576 }\'; }',
            "if ! command -v docker >/dev/null 2>&1; then",
            '  problem "docker is not installed"',
            "elif ! docker info >/dev/null 2>&1; then",
            '  problem "docker daemon not reachable as $(id -un) (is it running? docker group?)"',
            "else",
            "  compose=$(docker compose version --short 2>/dev/null || true)",
            '  case "$compose" in',
            "    v2.* | 2.* | v[3-9].* | [3-9].*) ;;",
            '    *) problem "docker compose v2 is required (found: ${compose:-none})" ;;',
            "  esac",
            "fi",
            f'[ -e {kfd} ] || problem "{kfd} is missing (amdgpu kernel driver not loaded?)"',
            f'[ -d {dri} ] || problem "{dri} is missing (no GPU render nodes)"',
            f"for dir in {base_dir} {patches_dir} {model_dir}; do",
            '  if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then',
            '    problem "$dir: not writable by $(id -un)"',
            "  fi",
            "done",
            f"if [ -d {model_dir} ]; then",
            f"  free_kib=$(df -Pk {model_dir} | awk 'NR == 2 {{ print $4 }}')",
            "  # The model already downloaded counts as free: a re-run must not fail on it.",
            f"  have_kib=$(du -sk {model_dir} | awk '{{ print $1 }}')",
            f"  need_kib={disk_kib}",
            '  if [ $((free_kib + have_kib)) -lt "$need_kib" ]; then',
            '    problem "disk: $(gib "$free_kib") free + $(gib "$have_kib") already in'
            f' {model_dir}, need $(gib "$need_kib")"',
            "  fi",
            "fi",
            "ram_kib=$(free -k | awk '/^Mem:/ { print $2 }')",
            f"need_ram_kib={ram_kib}",
            'if [ "${ram_kib:-0}" -lt "$need_ram_kib" ]; then',
            '  problem "RAM: $(gib "${ram_kib:-0}") installed, need $(gib "$need_ram_kib")"',
            "fi",
            'if [ "$problems" -gt 0 ]; then',
            '  echo "preflight: $problems problem(s); nothing was started" >&2',
            "  exit 1",
            "fi",
            'echo "preflight: ok"',
        ]
    )


def verify_patches_script(paths: RemotePaths, patches: list[PatchOverlay]) -> str:
    """Checks every copied overlay against its pinned sha256; any mismatch fails the deploy."""
    body = [
        "status=0",
        "verify() {",
        '  if [ ! -f "$1" ]; then',
        '    echo "patch $1: missing on the host" >&2',
        "    return 1",
        "  fi",
        "  local actual",
        "  actual=$(sha256sum \"$1\" | awk '{ print $1 }')",
        '  if [ "$actual" != "$2" ]; then',
        '    echo "patch $1: sha256 $actual, the config pins $2: stopping" >&2',
        "    return 1",
        "  fi",
        '  echo "patch $1: sha256 ok"',
        "}",
    ]
    for patch in patches:
        body.append(f"verify {patch_remote_path(paths, patch)} {patch['sha256']} || status=1")
    body.append('exit "$status"')
    return _script(body)


def fetch_script(
    *,
    paths: RemotePaths,
    model_dir: str,
    fetch_image: str,
    lock_sha256: str,
    fetcher_sha256: str,
    parallel: int = 3,
) -> str:
    """Runs the fetcher in a stock Python image: resumable, skips complete files, never deletes."""
    if not parse_image(fetch_image).pinned:
        raise ValueError(f"fetch_image {fetch_image!r}: pin a version tag or a digest")
    check_path("model_dir", model_dir)
    return _script(
        [
            f"# lock sha256 {lock_sha256}, fetcher sha256 {fetcher_sha256}",
            f"mkdir -p {model_dir}",
            "# As the SSH user, so the model files are not root's.",
            'docker run --rm --user "$(id -u):$(id -g)" --network host \\',
            "  -e PYTHONUNBUFFERED=1 \\",
            f"  -v {paths['fetcher']}:{FETCHER_MOUNT}/fetcher.py:ro \\",
            f"  -v {paths['lock']}:{FETCHER_MOUNT}/lock.json:ro \\",
            f"  -v {model_dir}:/models \\",
            f"  {fetch_image} \\",
            f"  python3 {FETCHER_MOUNT}/fetcher.py fetch --lock {FETCHER_MOUNT}/lock.json \\",
            f"  --dest /models --parallel {parallel}",
        ]
    )


def env_file_script(paths: RemotePaths, project: str) -> str:
    """Writes the API key env file (0600) from stdin; a running vLLM is recreated to apply it."""
    env_file = paths["env_file"]
    compose = f"docker compose -f {paths['compose']} -p {project}"
    return _script(
        [
            "umask 077",
            f"mkdir -p {posixpath.dirname(env_file)}",
            f"cat > {env_file}.new",
            f"chmod 600 {env_file}.new",
            f"if cmp -s {env_file}.new {env_file}; then",
            f"  rm -f {env_file}.new",
            '  echo "env file unchanged"',
            "  exit 0",
            "fi",
            f"mv -f {env_file}.new {env_file}",
            'echo "env file written"',
            "# vLLM reads its key only at start: apply a rotated key to a running server now.",
            f"running=$({compose} ps -q {VLLM_SERVICE} 2>/dev/null || true)",
            'if [ -n "$running" ]; then',
            f"  {compose} up -d --wait {VLLM_SERVICE}",
            "fi",
        ]
    )


def env_file_content(api_key: str) -> str:
    """The env file line for compose: single-quoted, so compose does not interpolate `$`."""
    if not api_key or any(c in api_key for c in "'\n\r\0"):
        raise ValueError("api_key: must be non-empty, without quotes or line breaks")
    return f"VLLM_API_KEY='{api_key}'\n"


def up_script(paths: RemotePaths, project: str, compose_sha256: str, wait_seconds: int) -> str:
    """Starts or updates the project; compose recreates only services whose config changed."""
    return _script(
        [
            f"# compose.yaml sha256 {compose_sha256}",
            f"docker compose -f {paths['compose']} -p {project} up -d --wait \\",
            f"  --wait-timeout {wait_seconds} --remove-orphans",
        ]
    )


def down_script(paths: RemotePaths, project: str, model_dir: str) -> str:
    """Stops and removes the containers; keeps the model directory and Caddy's certificates."""
    return _script(
        [
            f"# Leaves {model_dir} in place: a redeploy must not download 157 GiB again.",
            f"if [ -f {paths['compose']} ]; then",
            f"  docker compose -f {paths['compose']} -p {project} down \\",
            "    --remove-orphans --timeout 60",
            "fi",
        ]
    )


def models_probe(port: int, served_model_name: str) -> str:
    """Python run inside the vLLM container: `/v1/models` with the key from its environment."""
    return (
        "import json, os, urllib.request as u; "
        f"r = u.Request('http://127.0.0.1:{port}/v1/models', "
        "headers={'Authorization': 'Bearer ' + os.environ['VLLM_API_KEY']}); "
        "ids = [m['id'] for m in json.load(u.urlopen(r, timeout=30))['data']]; "
        f"assert {served_model_name!r} in ids, ids; print('served:', ids)"
    )


def check_script(
    paths: RemotePaths, project: str, caddy: CaddySettings, port: int, served_model_name: str
) -> str:
    """Final check: /health through Caddy's TLS site, then the served model with the API key."""
    compose = f"docker compose -f {paths['compose']} -p {project}"
    return _script(
        [
            "# Through Caddy on its container loopback (allowed); retried while a cert is issued.",
            "for attempt in $(seq 1 30); do",
            f"  if {compose} exec -T {CADDY_SERVICE} wget -q -O /dev/null \\",
            f"    --header 'Host: {caddy['site']}' https://127.0.0.1/health; then",
            '    echo "caddy -> vllm /health: ok"',
            "    break",
            "  fi",
            '  if [ "$attempt" -eq 30 ]; then',
            '    echo "check: /health through Caddy failed 30 times" >&2',
            "    exit 1",
            "  fi",
            "  sleep 10",
            "done",
            "# The key stays in the container's environment: no argv ever holds it.",
            f"{compose} exec -T {VLLM_SERVICE} \\",
            f'  python3 -c "{models_probe(port, served_model_name)}"',
        ]
    )


def lock_json(lock: dict[str, Any]) -> str:
    """The lock document as the fetcher reads it; raise ValueError when it is not version 1."""
    # An unlocked model (a preview before `llm-infra lock`) names its patterns instead of files.
    if lock.get("version") != 1 or not (lock.get("files") or lock.get("unresolved_patterns")):
        raise ValueError("model_lock: a version 1 lock with at least one file is required")
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def lock_sha256(lock: dict[str, Any]) -> str:
    """The lock's digest as the fetcher computes it (names its completion marker)."""
    return lock_digest(lock)


def verify_script(
    base_dir: str,
    project: str,
    image: str,
    port: int,
    expectations_sha256: str,
    min_decode_tps: float | None = None,
) -> str:
    """Runs verify.py on the compose network against vLLM; fails when the answers differ."""
    verify_dir = posixpath.join(base_dir, "verify")
    env_file = remote_paths(base_dir)["env_file"]
    return _script(
        [
            f"# expectations sha256 {expectations_sha256}",
            # The key is read from the mounted 0600 env file: never in argv or the environment.
            f"docker run --rm --network {project}_default \\",
            f"  -v {verify_dir}:/opt/llm-infra-verify:ro \\",
            f"  -v {env_file}:/run/llm-infra/vllm.env:ro \\",
            f"  {image} python3 /opt/llm-infra-verify/verify.py http://{VLLM_SERVICE}:{port} \\",
            "  --expect /opt/llm-infra-verify/expect.json \\",
            "  --api-key-env-file /run/llm-infra/vllm.env"
            + ("" if min_decode_tps is None else f" --min-decode-tps {float(min_decode_tps)!r}"),
        ]
    )
