"""Pure builders of VllmRocmServer's remote commands: preflight, fetch, env file, up, check, down.

Each is a bash script (shellcheck-clean) that pulumi-command runs over SSH.
"""

import posixpath
import shlex

from pydantic_core import PydanticCustomError

from components.grammars import env_file_value
from components.model_store.inputs import MODELS_MOUNT
from components.payloads import (
    EXPECTED_PROPS_FILE,
    FETCHER_FILE,
    FETCHER_MOUNT,
    HTTP_POLICY_FILE,
    LOCK_FILE,
    VERIFY_MOUNT,
)
from components.vllm.builders import (
    CADDY_SERVICE,
    VLLM_SERVICE,
    RemotePaths,
    generated_header,
    patch_remote_path,
    remote_paths,
)
from components.vllm.inputs import CaddySite, HostRequirements, PatchOverlay

SCRIPT_END = "LLM_INFRA_SCRIPT"

q = shlex.quote
"""Every value enters a script as one quoted word."""


_COMMAND_HEAD = f"bash -c \"$(cat <<'{SCRIPT_END}'\n"
_COMMAND_TAIL = f'{SCRIPT_END}\n)"\n'


def remote_command(script: str) -> str:
    """A script as one SSH command: bash runs it whatever the login shell, stdin left alone."""
    if SCRIPT_END in script:
        raise ValueError(f"a script may not contain {SCRIPT_END}")
    if not script.endswith("\n"):
        raise ValueError("a script ends with a newline")
    return f"{_COMMAND_HEAD}{script}{_COMMAND_TAIL}"


def remote_script(command: str) -> str | None:
    """The script a `remote_command` runs (None for any other command): what `render` shows."""
    if not (command.startswith(_COMMAND_HEAD) and command.endswith(_COMMAND_TAIL)):
        return None
    script = command[len(_COMMAND_HEAD) : -len(_COMMAND_TAIL)]
    return script if remote_command(script) == command else None


def _script(body: list[str]) -> str:
    return "\n".join(["#!/usr/bin/env bash", "set -euo pipefail", *body]) + "\n"


def _after_up(up_sha256: str | None) -> list[str]:
    return [] if up_sha256 is None else [f"# after up {up_sha256}"]


def preflight_script(
    *,
    base_dir: str,
    model_dir: str,
    requirements: HostRequirements,
    devices: tuple[str, str] = ("/dev/kfd", "/dev/dri"),
) -> str:
    """Host checks that report every problem with its numbers; creates only the directories."""
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
            f'[ -e {q(kfd)} ] || problem "{kfd} is missing (amdgpu kernel driver not loaded?)"',
            f'[ -d {q(dri)} ] || problem "{dri} is missing (no GPU render nodes)"',
            f"for dir in {q(base_dir)} {q(patches_dir)} {q(model_dir)}; do",
            '  if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then',
            '    problem "$dir: not writable by $(id -un)"',
            "  fi",
            "done",
            f"if [ -d {q(model_dir)} ]; then",
            f"  free_kib=$(df -Pk {q(model_dir)} | awk 'NR == 2 {{ print $4 }}')",
            "  # The model already downloaded counts as free: a re-run must not fail on it.",
            f"  have_kib=$(du -sk {q(model_dir)} | awk '{{ print $1 }}')",
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
    if not patches:
        return _script(['echo "patches: none to verify"'])
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
        body.append(f"verify {q(patch_remote_path(paths, patch))} {q(patch['sha256'])} || status=1")
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
    policy_mount = f"{FETCHER_MOUNT}/{HTTP_POLICY_FILE}"
    fetcher, lock = f"{FETCHER_MOUNT}/{FETCHER_FILE}", f"{FETCHER_MOUNT}/{LOCK_FILE}"
    return _script(
        [
            f"# lock sha256 {lock_sha256}, fetcher sha256 {fetcher_sha256}",
            f"mkdir -p {q(model_dir)}",
            "# As the SSH user, so the model files are not root's.",
            'docker run --rm --user "$(id -u):$(id -g)" --network host \\',
            "  -e PYTHONUNBUFFERED=1 \\",
            f"  -v {bind(paths['fetcher'], fetcher, read_only=True)} \\",
            f"  -v {bind(paths['http_policy'], policy_mount, read_only=True)} \\",
            f"  -v {bind(paths['lock'], lock, read_only=True)} \\",
            f"  -v {bind(model_dir, MODELS_MOUNT)} \\",
            f"  {q(fetch_image)} \\",
            f"  python3 {fetcher} fetch --lock {lock} \\",
            f"  --dest {MODELS_MOUNT} --parallel {parallel}",
        ]
    )


def env_file_script(paths: RemotePaths, project: str) -> str:
    """Writes the API key env file (0600) from stdin; a running vLLM is recreated to apply it."""
    env_file = paths["env_file"]
    compose = f"docker compose -f {q(paths['compose'])} -p {q(project)}"
    return _script(
        [
            "umask 077",
            f"mkdir -p {q(posixpath.dirname(env_file))}",
            f"cat > {q(env_file)}.new",
            f"chmod 600 {q(env_file)}.new",
            f"if cmp -s {q(env_file)}.new {q(env_file)}; then",
            f"  rm -f {q(env_file)}.new",
            '  echo "env file unchanged"',
            "  exit 0",
            "fi",
            f"mv -f {q(env_file)}.new {q(env_file)}",
            'echo "env file written"',
            "# vLLM reads its key only at start: apply a rotated key to a running server now.",
            f"running=$({compose} ps -q {VLLM_SERVICE} 2>/dev/null || true)",
            'if [ -n "$running" ]; then',
            f"  {compose} up -d --wait {VLLM_SERVICE}",
            "fi",
        ]
    )


def env_file_content(api_key: str, stack: str) -> str:
    """The env file for compose: the generated-by header, then the key single-quoted, so
    compose does not interpolate `$`."""
    try:
        line = f"VLLM_API_KEY='{env_file_value(api_key)}'\n"
    except PydanticCustomError as exc:
        raise ValueError(f"api_key: {exc}") from None
    return generated_header(stack) + line


def up_script(paths: RemotePaths, project: str, compose_sha256: str, wait_seconds: int) -> str:
    """Starts or updates the project; compose recreates only services whose config changed."""
    return _script(
        [
            f"# compose.yaml sha256 {compose_sha256}",
            f"docker compose -f {q(paths['compose'])} -p {q(project)} up -d --wait \\",
            f"  --wait-timeout {wait_seconds} --remove-orphans",
        ]
    )


def down_script(paths: RemotePaths, project: str, model_dir: str) -> str:
    """Stops and removes the containers; keeps the model directory and Caddy's certificates."""
    return _script(
        [
            f"# Leaves {model_dir} in place: a redeploy must not download 157 GiB again.",
            f"if [ -f {q(paths['compose'])} ]; then",
            f"  docker compose -f {q(paths['compose'])} -p {q(project)} down \\",
            "    --remove-orphans --timeout 60",
            "fi",
        ]
    )


# Run inside the vLLM container with the port and the served name as arguments: the key stays
# in the container's environment, and no value is ever part of the program text.
MODELS_PROBE = (
    "import json, os, sys, urllib.request as u; "
    "port, name = int(sys.argv[1]), sys.argv[2]; "
    'r = u.Request(f"http://127.0.0.1:{port}/v1/models", '
    'headers={"Authorization": "Bearer " + os.environ["VLLM_API_KEY"]}); '
    'ids = [m["id"] for m in json.load(u.urlopen(r, timeout=30))["data"]]; '
    'assert name in ids, ids; print("served:", ids)'
)


def bind(source: str, target: str, *, read_only: bool = False) -> str:
    """A `docker run -v` bind mount, quoted as one argument."""
    return q(f"{source}:{target}" + (":ro" if read_only else ""))


def check_script(
    paths: RemotePaths,
    project: str,
    caddy: CaddySite,
    port: int,
    served_model_name: str,
    *,
    up_sha256: str | None = None,
) -> str:
    """Final check: /health through Caddy's TLS site, then the served model with the API key.

    `up_sha256`, the up command's digest, makes every change that restarts something a new
    check."""
    compose = f"docker compose -f {q(paths['compose'])} -p {q(project)}"
    return _script(
        [
            *_after_up(up_sha256),
            "# Through Caddy on its container loopback (allowed); retried while a cert is issued.",
            "for attempt in $(seq 1 30); do",
            f"  if {compose} exec -T {CADDY_SERVICE} wget -q -O /dev/null \\",
            f"    --header {q('Host: ' + caddy['site'])} https://127.0.0.1/health; then",
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
            f"  python3 -c {q(MODELS_PROBE)} {int(port)} {q(served_model_name)}",
        ]
    )


def verify_script(
    base_dir: str,
    project: str,
    image: str,
    vllm_address: str,
    expectations_sha256: str,
    min_decode_tps: float | None = None,
    *,
    up_sha256: str | None = None,
) -> str:
    """Runs verify.py on the compose network against vLLM (`vllm_address`, host:port); fails when
    the answers differ or /v1/models reports other than props.json (`expectations_sha256`
    covers both files). `up_sha256` as for `check_script`."""
    verify_dir = posixpath.join(base_dir, "verify")
    env_file = remote_paths(base_dir)["env_file"]
    return _script(
        [
            *_after_up(up_sha256),
            f"# expectations sha256 {expectations_sha256}",
            # The key is read from the mounted 0600 env file: never in argv or the environment.
            f"docker run --rm --network {q(project + '_default')} \\",
            f"  -v {bind(verify_dir, VERIFY_MOUNT, read_only=True)} \\",
            f"  -v {bind(env_file, '/run/llm-infra/vllm.env', read_only=True)} \\",
            f"  {q(image)} python3 {VERIFY_MOUNT}/verify.py {q('http://' + vllm_address)} \\",
            f"  --expect {VERIFY_MOUNT}/expect.json \\",
            f"  --props {VERIFY_MOUNT}/{EXPECTED_PROPS_FILE} \\",
            "  --api-key-env-file /run/llm-infra/vllm.env"
            + ("" if min_decode_tps is None else f" --min-decode-tps {float(min_decode_tps)!r}"),
        ]
    )
