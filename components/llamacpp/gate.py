"""The GPU gate's shell for the llama-server Deployment: the container command and the probe.

The server image has no Python, so the gate runs there as POSIX sh: ``server_command`` keeps the
load log (``--log-file`` through a FIFO whose reader keeps the load, up to ``listening on``, and
drops what follows; the container's stdout, rotated by the kubelet, keeps everything), and
``probe_command`` is the startupProbe that reads it. It decides what the Python check
(``components/payloads/gpu_gate.py``, ``llm-infra gpu-gate``) decides, with its messages: the
offload, the degradation lines of ``gate_ops.DEGRADATIONS`` (its patterns are the probe's
``grep -E`` patterns) and the first decode of ``gate_decode``.
"""

import shlex

from components.payloads.gate_decode import (
    DECODE_BODY,
    DECODE_FAILURES,
    DECODE_PATH,
    DECODE_TIMEOUT_S,
    WHAT,
)
from components.payloads.gate_log import DRAFT_LOADING
from components.payloads.gate_ops import ANY_DEGRADATION, DEGRADATIONS, PREFIX_SED
from components.payloads.gpu_gate import (
    DRAFT_LAYERS_CAUSE,
    FEWER_LAYERS_CAUSE,
    NO_GPU_CAUSE,
    OFFLOADED_LINE,
    VERBOSITY_HINT,
)

LOADED_MARKER = "listening on http"
"""The line after which the load log is complete (``llama_server: listening on http://...``)."""
LOAD_LOG_LIMIT = 16 * 1024 * 1024
"""Most bytes the pod's load log may hold: a -lv 4 load of the 87 GiB model is a few dozen KiB."""


# grep -E for a model buffer line of the device with a size above zero (%8.2f: "0.00" is zero).
_NONZERO_MIB = r"= *(0*[1-9][0-9]*\.[0-9]+|0*\.[0-9]*[1-9][0-9]*) MiB"


def degradation_shell() -> str:
    """POSIX sh: print one FAIL line per degraded message of "$log" (as ``gate_ops`` words it).

    One ``grep -E`` of every pattern over the log, then each entry's pattern over those hits,
    in table order, each message once; sets ``deg=1`` when any was found.
    """
    lines = [
        "deg=0",
        f'hits=$(grep -E {shlex.quote(ANY_DEGRADATION)} "$log" | sed {shlex.quote(PREFIX_SED)})',
        'if [ -n "$hits" ]; then',
    ]
    for entry in DEGRADATIONS:
        before, after = entry.finding_parts()
        benign = f" | grep -Ev {shlex.quote(entry.benign)}" if entry.benign else ""
        lines += [
            f"  found=$(printf '%s\\n' \"$hits\" | grep -E {shlex.quote(entry.pattern)}{benign}"
            " | awk '!s[$0]++')",
            '  [ -z "$found" ] || { deg=1; printf \'%s\\n\' "$found" | while IFS= read -r l; do '
            f"printf 'gpu-gate: FAIL: %s%s%s\\n' {shlex.quote(before)} \"$l\" "
            f"{shlex.quote(after)}; done; }}",
        ]
    return "\n".join([*lines, "fi", ""])


def _decode_fail(kind: str, detail: str = '""') -> str:
    """A call of the probe's ``fail_decode`` with the pieces of ``gate_decode.decode_failure``."""
    before, after, cause = DECODE_FAILURES[kind]
    quoted = " ".join(shlex.quote(piece) for piece in (after, cause))
    return f"fail_decode {shlex.quote(before)} {detail} {quoted}"


def first_decode_shell(
    base_url: str, api_key_file: str | None = None, timeout: int = DECODE_TIMEOUT_S
) -> str:
    """POSIX sh: one ``POST /completion`` of one token with curl; FAIL as ``gate_decode`` words it.

    The API key, when configured, is read from its file (as llama-server reads
    ``--api-key-file``: the first line neither empty nor a comment) and handed to curl on stdin
    (``-H @-``), never in an argument.
    """
    url = shlex.quote(base_url.rstrip("/") + DECODE_PATH)
    code = '"$code"'
    curl = (
        f"curl -sS -o /dev/null -w '%{{http_code}}' --max-time {int(timeout)} "
        f"-H 'Content-Type: application/json' --data {shlex.quote(DECODE_BODY)}"
    )
    if api_key_file:
        send = (
            f"kf={shlex.quote(api_key_file)}\n"
            '[ -r "$kf" ] || { echo "gpu-gate: FAIL: cannot read the API key file $kf"; '
            "exit 1; }\n"
            "key=$(sed -n '/^#/d;/./{p;q;}' \"$kf\")\n"
            f"code=$(printf 'Authorization: Bearer %s\\n' \"$key\" | {curl} -H @- {url} "
            "2>/dev/null)\n"
        )
    else:
        send = f"code=$({curl} {url} 2>/dev/null)\n"
    return (
        "fail_decode() { printf 'gpu-gate: FAIL: %s%s%s%s; %s\\n' "
        f'{shlex.quote(WHAT)} "$1" "$2" "$3" "$4"; exit 1; }}\n'
        f"{send}rc=$?\n"
        "case $rc in\n"
        "  0) ;;\n"
        f"  7) {_decode_fail('refused')};;\n"
        f"  28) {_decode_fail('timeout', str(int(timeout)))};;\n"
        f"  *) {_decode_fail('dropped')};;\n"
        "esac\n"
        "case $code in\n"
        "  200) ;;\n"
        f"  5*) {_decode_fail('server-error', code)};;\n"
        f"  401|403) {_decode_fail('unauthorized', code)};;\n"
        f"  *) {_decode_fail('rejected', code)};;\n"
        "esac\n"
    )


def _health_shell(health_url: str | None) -> str:
    if not health_url:
        return ""
    url = shlex.quote(health_url.rstrip("/") + "/health")
    return (
        f"curl -fsS -o /dev/null --max-time 5 {url} || "
        '{ echo "gpu-gate: not healthy yet (the model is still loading)"; exit 1; }\n'
    )


def _rpc_shell(rpc_endpoints: tuple[str, ...] | list[str]) -> str:
    """Each rpc-server must hold a non-zero model buffer in the last load (``$last``)."""
    return "".join(
        f"ep={shlex.quote(endpoint)}\n"
        'printf \'%s\\n\' "$last" | grep -F "[$ep] model buffer size" | '
        f'grep -Eq "{_NONZERO_MIB}" || '
        '{ echo "gpu-gate: FAIL: no non-zero model buffer on the RPC device $ep: its layers '
        'did not land there ($seen)"; exit 1; }\n'
        for endpoint in rpc_endpoints
    )


_HOST_BUFFER = r"^(CPU[^ ]*|[^ ]*_Host) "
_RPC_BUFFER = r"^RPC[0-9]+\["
_NONZERO = r" (0*[1-9][0-9]*\.[0-9]+|0*\.[0-9]*[1-9][0-9]*)$"


def host_probe_shell(
    log_path: str,
    health_url: str | None = None,
    rpc_endpoints: tuple[str, ...] | list[str] = (),
    decode: str = "",
) -> str:
    """POSIX sh for the startupProbe of a runtime without a GPU (the CPU build): exit 0 when
    the last load holds non-zero host model buffers and none on a GPU (an RPC worker's, listed,
    must hold one), as ``gpu_gate.evaluate_host`` decides; a degradation line fails it as it
    fails a GPU runtime's probe, and ``decode`` (``first_decode_shell``) runs last."""
    log = shlex.quote(log_path)
    verbosity = shlex.quote(VERBOSITY_HINT)
    return (
        _health_shell(health_url) + f"log={log}\n"
        '[ -s "$log" ] || { echo "gpu-gate: FAIL: no load log at $log yet (llama-server writes '
        'it with --log-file)"; exit 1; }\n' + degradation_shell() + '[ "$deg" = 0 ] || exit 1\n'
        "if grep -q 'common_params_print_info: verbosity = [0-3] ' \"$log\"; then\n"
        f'  echo "gpu-gate: FAIL: the log is below -lv 4; "{verbosity}; exit 1\n'
        "fi\n"
        "start=$(grep -n 'load_tensors: loading model tensors' \"$log\" | tail -n 1 | "
        "cut -d: -f1)\n"
        'last=$(sed -n "${start:-1},\\$p" "$log")\n'
        "bufs=$(printf '%s\\n' \"$last\" | sed -n 's/^.*load_tensors: *\\([^ ]*\\) model buffer "
        "size = *\\([0-9.]*\\) MiB.*/\\1 \\2/p')\n"
        "seen=\"seen: model buffers $(printf '%s\\n' \"$bufs\" | sed '/^$/d; s/$/ MiB/' | "
        "tr '\\n' ',' | sed 's/,$//')\"\n"
        f"printf '%s\\n' \"$bufs\" | grep -Ev '{_HOST_BUFFER}' | grep -Ev '{_RPC_BUFFER}' | "
        f"grep -Eq '{_NONZERO}' && "
        '{ echo "gpu-gate: FAIL: a non-zero GPU model buffer, where the runtime expects none '
        '($seen)"; exit 1; }\n'
        f"printf '%s\\n' \"$bufs\" | grep -E '{_HOST_BUFFER}' | grep -Eq '{_NONZERO}' || "
        '{ echo "gpu-gate: no non-zero host model buffer yet ($seen)"; exit 1; }\n'
        + _rpc_shell(rpc_endpoints)
        + decode
        + 'echo "gpu-gate: PASS every layer on the host ($seen)"\n'
    )


def probe_shell(
    log_path: str,
    expect_layers: int,
    device_prefix: str | None = "Vulkan",
    health_url: str | None = None,
    rpc_endpoints: tuple[str, ...] | list[str] = (),
    api_key_file: str | None = None,
    first_decode: bool = True,
    decode_timeout: int = DECODE_TIMEOUT_S,
    draft: bool = False,
) -> str:
    """POSIX sh for an exec startupProbe in the server image (no python there): exit 0 = on GPU.

    Needs ``--log-file LOG_PATH -lv 4``. The CPU-fallback warning does not reach the log file,
    so a GPU-less container is caught by the offload line being absent after a finished load.
    Only the last load in the log counts (at ``-lv 5`` the memory fit's dry run logs one first).
    Every failure prints one line: what was seen and the likely cause (the probe's event).
    With ``health_url`` (e.g. ``http://127.0.0.1:8080``) it first requires ``/health`` 200 via
    curl, which the llama.cpp server images ship for their own healthcheck. With
    ``rpc_endpoints`` each rpc-server must hold a non-zero model buffer as well. Every
    degradation line of the log (``gate_ops``) fails it, one line each. Last, with
    ``health_url`` and ``first_decode``, one one-token ``POST /completion`` must be answered
    (``api_key_file``: the server's ``--api-key-file``); the probe passes once per start, so
    this runs once per start. Without ``device_prefix`` (a runtime without a GPU) the buffers
    decide as ``host_probe_shell`` says, with the same degradation and first-decode checks.
    With ``draft`` (speculative decoding with a draft model) the target's load is the one
    before the draft's, and the draft must have every layer on the GPU too
    (``gpu_gate.draft_problems``).
    """
    decode = ""
    if health_url and first_decode:
        decode = first_decode_shell(health_url, api_key_file, decode_timeout)
    if not device_prefix:
        return host_probe_shell(log_path, health_url, rpc_endpoints, decode)
    log = shlex.quote(log_path)
    prefix = shlex.quote(device_prefix)
    health = _health_shell(health_url)
    no_gpu = shlex.quote(NO_GPU_CAUSE)
    fewer = shlex.quote(FEWER_LAYERS_CAUSE)
    verbosity = shlex.quote(VERBOSITY_HINT)
    head = (
        f"log={log}; dev={prefix}\n"
        '[ -s "$log" ] || { echo "gpu-gate: FAIL: no load log at $log yet (llama-server writes '
        'it with --log-file)"; exit 1; }\n'
    )
    if draft:
        # The target's last load ends where the draft's begins (it is still loading while the
        # draft's line is absent: the whole log so far is the target's).
        region = (
            f'dl=$(grep -n {shlex.quote(DRAFT_LOADING)} "$log" | tail -n 1 | cut -d: -f1)\n'
            "start=$(grep -n 'load_tensors: loading model tensors' \"$log\" | cut -d: -f1 | "
            "awk -v e=\"${dl:-0}\" 'e == 0 || $1 < e' | tail -n 1)\n"
            'if [ -n "$dl" ]; then end=$((dl - 1)); else end=\\$; fi\n'
            'last=$(sed -n "${start:-1},${end}p" "$log")\n'
        )
    else:
        # The last load only: from its 'loading model tensors' line to the end.
        region = (
            "start=$(grep -n 'load_tensors: loading model tensors' \"$log\" | tail -n 1 | "
            "cut -d: -f1)\n"
            'last=$(sed -n "${start:-1},\\$p" "$log")\n'
        )
    offload = region + (
        "devs=$(sed -n 's/^.*common_param: *- \\([^ ]*\\) *: \\(.*\\) "
        "(\\([0-9]*\\) MiB, .*/\\1 (\\2)/p'"
        ' "$log" | tr "\\n" "," | sed "s/,$//")\n'
        "bufs=$(printf '%s\\n' \"$last\" | sed -n 's/^.*load_tensors: *\\([^ ]*\\) model "
        "buffer size = *\\([0-9.]*\\) MiB.*/\\1 \\2 MiB/p' | tr '\\n' ',' | sed 's/,$//')\n"
        "off=$(printf '%s\\n' \"$last\" | grep -o 'offloaded [0-9]*/[0-9]* layers to GPU' | "
        "tail -n 1)\n"
        'seen="seen: devices ${devs:-none listed}; ${off:-no offload line}; model buffers '
        '${bufs:-none}"\n'
        'if [ -z "$off" ]; then\n'
        "  if grep -q 'common_params_print_info: verbosity = [0-3] ' \"$log\"; then\n"
        f"    echo \"gpu-gate: FAIL: no '{OFFLOADED_LINE}' line: the log is below -lv 4; \""
        f"{verbosity}; exit 1\n"
        "  fi\n"
        '  if grep -q \'llama_server: model loaded\' "$log" || [ -n "$bufs" ]; then\n'
        f"    echo \"gpu-gate: FAIL: no GPU used: no '{OFFLOADED_LINE}' line after a finished "
        f'load ($seen); "{no_gpu}; exit 1\n'
        "  fi\n"
        f"  echo \"gpu-gate: no '{OFFLOADED_LINE}' line yet: still loading ($seen)\"; exit 1\n"
        "fi\n"
        "n=${off#offloaded }; n=${n%%/*}; m=${off#*/}; m=${m%% *}\n"
        f'want={int(expect_layers)}; [ "$want" -gt "$m" ] && want=$m\n'
        '[ "$n" -ge "$want" ] || { echo "gpu-gate: FAIL: $n/$m layers on GPU, want $want '
        f'($seen); "{fewer}; exit 1; }}\n'
        # RPC devices are named with their endpoint: RPC0[host:port].
        'printf \'%s\\n\' "$last" | grep -Eq "load_tensors: *${dev}[0-9]+(\\[[^]]*\\])? model '
        f'buffer size {_NONZERO_MIB}" || '
        '{ echo "gpu-gate: FAIL: no non-zero ${dev} model buffer in the last load ($seen)"; '
        "exit 1; }\n"
    )
    if draft:
        offload += _draft_shell()
    return (
        health
        + head
        + degradation_shell()
        + offload
        + _rpc_shell(rpc_endpoints)
        + '[ "$deg" = 0 ] || exit 1\n'
        + decode
        + 'echo "gpu-gate: PASS $n/$m layers on GPU ($seen)"\n'
    )


def _draft_shell() -> str:
    """POSIX sh after the target's checks (``$dl``: the draft's first line): the speculative
    draft's load holds every layer of it on the device, with a non-zero model buffer there."""
    cause = shlex.quote(DRAFT_LAYERS_CAUSE)
    return (
        'if [ -z "$dl" ]; then\n'
        "  if grep -q 'llama_server: model loaded' \"$log\"; then\n"
        '    echo "gpu-gate: FAIL: the speculative draft was not loaded ($seen)"; exit 1\n'
        "  fi\n"
        '  echo "gpu-gate: the speculative draft is not loaded yet ($seen)"; exit 1\n'
        "fi\n"
        'dlast=$(sed -n "${dl},\\$p" "$log")\n'
        "doff=$(printf '%s\\n' \"$dlast\" | grep -o 'offloaded [0-9]*/[0-9]* layers to GPU' | "
        "tail -n 1)\n"
        "dbufs=$(printf '%s\\n' \"$dlast\" | sed -n 's/^.*load_tensors: *\\([^ ]*\\) model "
        "buffer size = *\\([0-9.]*\\) MiB.*/\\1 \\2 MiB/p' | tr '\\n' ',' | sed 's/,$//')\n"
        'dseen="draft: ${doff:-no offload line}; model buffers ${dbufs:-none}"\n'
        'if [ -z "$doff" ]; then\n'
        "  if grep -q 'llama_server: model loaded' \"$log\"; then\n"
        f'    echo "gpu-gate: FAIL: the speculative draft: no offload line ($dseen)"; exit 1\n'
        "  fi\n"
        '  echo "gpu-gate: the speculative draft is still loading ($dseen)"; exit 1\n'
        "fi\n"
        "dn=${doff#offloaded }; dn=${dn%%/*}; dm=${doff#*/}; dm=${dm%% *}\n"
        '[ "$dn" -ge "$dm" ] || { echo "gpu-gate: FAIL: the speculative draft: $dn/$dm of its '
        f'layers on GPU, want all ($dseen); "{cause}; exit 1; }}\n'
        'printf \'%s\\n\' "$dlast" | grep -Eq "load_tensors: *${dev}[0-9]+(\\[[^]]*\\])? model '
        f'buffer size {_NONZERO_MIB}" || '
        '{ echo "gpu-gate: FAIL: the speculative draft: no non-zero ${dev} model buffer '
        '($dseen)"; exit 1; }\n'
        'seen="$seen; $dseen"\n'
    )


def probe_command(
    log_path: str,
    expect_layers: int,
    health_url: str | None = None,
    device_prefix: str | None = "Vulkan",
    rpc_endpoints: tuple[str, ...] | list[str] = (),
    api_key_file: str | None = None,
    draft: bool = False,
) -> list[str]:
    """``exec.command`` for a Kubernetes probe running ``probe_shell``."""
    script = probe_shell(
        log_path, expect_layers, device_prefix, health_url, rpc_endpoints, api_key_file,
        draft=draft,
    )  # fmt: skip
    return ["sh", "-c", script]


def load_log_shell(
    log_path: str, binary: str = "/app/llama-server", limit: int = LOAD_LOG_LIMIT
) -> str:
    """POSIX sh that runs llama-server (``"$@"``) with a log file that holds the load only.

    ``--log-file LOG_PATH`` in the arguments is pointed at a FIFO beside it; a reader copies the
    FIFO into LOG_PATH up to the ``listening on`` line (at most ``limit`` bytes), then drains it
    to /dev/null. So LOG_PATH is the gate's evidence, written once per start, and never grows
    with traffic; the console output (the container log) is untouched. llama-server stays the
    process the kubelet signals (``exec``), and it ignores SIGPIPE: a dead reader loses log
    lines, never the server.
    """
    log = shlex.quote(log_path)
    fifo = shlex.quote(log_path.rsplit("/", 1)[0] + "/.llama-server-log.fifo")
    return (
        f"log={log}; fifo={fifo}\n"
        'rm -f "$fifo" && mkfifo "$fifo" || { echo "llama-server-log: cannot make $fifo" >&2; '
        "exit 1; }\n"
        'n=$#; prev=\nfor a in "$@"; do\n'
        '  if [ "$prev" = --log-file ] && [ "$a" = "$log" ]; then a=$fifo; fi\n'
        '  set -- "$@" "$a"; prev=$a\ndone\nshift "$n"\n'
        f"{{ sed -e '/{LOADED_MARKER}/q' | head -c {int(limit)} > \"$log\"; "
        'exec cat > /dev/null; } < "$fifo" &\n'
        f'exec {shlex.quote(binary)} "$@"\n'
    )


def server_command(log_path: str, binary: str = "/app/llama-server") -> list[str]:
    """Container ``command`` running ``load_log_shell``; the llama-server argv are its ``args``."""
    return ["sh", "-c", load_log_shell(log_path, binary), "llama-server"]
