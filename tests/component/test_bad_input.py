"""Bad input, exhaustively: each invalid stack exits 2 from render, names its key, writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra import program
from infra.config import ConfigError, read_stack_file
from infra.render import run_program
from infra.render_out import write
from tests.conftest import ROOT, STACKS, write_stack
from tests.support.cli import run_cli
from tests.support.stack_edits import DELETE, Edit, edited

CASES: list[tuple[str, str, list[Edit], str]] = [
    # (id, stack, edits, the key the first problem line must name)
    ("wrong type gpuLayers", "strix-halo", [("server", "gpuLayers", "forty")], "server.gpuLayers"),
    ("negative gpuLayers", "strix-halo", [("server", "gpuLayers", -1)], "server.gpuLayers"),
    ("gpuLayers past output layer", "strix-halo", [("server", "gpuLayers", 45)], "server.gpuLayers"),
    ("unknown server key", "strix-halo", [("server", "ngl", 40)], "server.ngl"),
    ("unknown top-level key", "strix-halo", [("servr", "", {"a": 1})], "servr"),
    ("missing alias", "strix-halo", [("server", "alias", DELETE)], "server.alias"),
    ("empty alias", "strix-halo", [("server", "alias", "")], "server.alias"),
    ("context below 64k", "strix-halo", [("server", "contextSize", 32768)], "server.contextSize"),
    ("slots too small", "strix-halo", [("server", "parallel", 4)], "server.parallel"),
    ("zero slots", "strix-halo", [("server", "parallel", 0)], "server.parallel"),
    ("unknown cache type", "strix-halo", [("server", "cacheTypeK", "q3_k")], "server.cacheTypeK"),
    ("K and V differ", "strix-halo", [("server", "cacheTypeV", "f16")], "server.cacheTypeV"),
    ("port zero", "strix-halo", [("server", "port", 0)], "server.port"),
    ("port too high", "strix-halo", [("server", "port", 70000)], "server.port"),
    ("metrics port is the server's", "strix-halo", [("metrics", "port", 8080)], "metrics.port"),
    ("port as a bool", "strix-halo", [("server", "port", True)], "server.port"),
    ("temperature as a string", "strix-halo", [("server", "temperature", "1.0")], "server.temperature"),
    ("temperature as a bool", "strix-halo", [("server", "temperature", False)], "server.temperature"),
    ("floating image", "strix-halo", [("server", "image", "ghcr.io/ggml-org/llama.cpp:server-vulkan")], "server.image"),
    ("malformed digest", "strix-halo", [("server", "image", "ghcr.io/x/y@sha256:beef")], "server.image"),
    ("top-p above 1", "strix-halo", [("server", "topP", 1.5)], "server.topP"),
    ("negative temperature", "strix-halo", [("server", "temperature", -0.1)], "server.temperature"),
    ("zero threads", "strix-halo", [("server", "threads", 0)], "server.threads"),
    ("bad memory quantity", "strix-halo", [("server", "resources.limits.memory", "20GB")], "server.resources.limits.memory"),
    ("request above limit", "strix-halo", [("server", "resources.requests.cpu", "8")], "server.resources.requests.cpu"),
    ("startup probe too short", "strix-halo", [("server", "probes", {"startup": {"initialDelaySeconds": 0, "periodSeconds": 5, "failureThreshold": 2}})], "server.probes.startup"),
    ("unknown gpu access", "strix-halo", [("server", "gpuAccess", "vfio")], "server.gpuAccess"),
    ("render group while privileged", "strix-halo", [("server", "renderGroupId", 991)], "server.renderGroupId"),
    ("missing shard", "strix-halo", [("model", "files", ["UD-IQ1_M/DeepSeek-V4-Flash-0731-UD-IQ1_M-00001-of-00003.gguf", "UD-IQ1_M/DeepSeek-V4-Flash-0731-UD-IQ1_M-00003-of-00003.gguf"])], "model.files"),
    ("bad repo id", "strix-halo", [("model", "repo", "not a repo")], "model.repo"),
    ("layers disagree with metadata", "strix-halo", [("model", "layers", 42)], "model.layers"),
    ("bad namespace", "strix-halo", [("kubernetes", "namespace", "LLM_Namespace")], "kubernetes.namespace"),
    ("empty network clients", "strix-halo", [("network", "clients", [])], "network.clients"),
    ("malformed node CIDR", "strix-halo", [("network", "allowCidrs", ["192.168.1.10/24"])], "network.allowCidrs[0]"),
    ("floating fetch image", "strix-halo", [("store", "fetchImage", "python:3")], "store.fetchImage"),
    ("bad hf endpoint", "strix-halo", [("store", "hfEndpoint", "mirror.local")], "store.hfEndpoint"),
    ("too many parallel downloads", "strix-halo", [("store", "parallelDownloads", 64)], "store.parallelDownloads"),
    ("does not fit VRAM", "strix-halo", [("memory", "vramGib", 60)], "plan"),
    ("startup probe shorter than the load", "strix-halo", [("memory", "diskReadMibps", 20)], "server.probes.startup"),
    ("unknown target", "strix-halo", [("target", "", "nomad")], "target"),
    ("extra arg the program renders", "strix-halo", [("server", "extraArgs", ["-c", "4096"])], "server.extraArgs[0]"),
    ("extra arg llama-server lacks", "strix-halo", [("server", "extraArgs", ["--n-cpu-mo", "3"])], "server.extraArgs[0]"),
    ("extra arg without its value", "strix-halo", [("server", "extraArgs", ["--override-kv"])], "server.extraArgs[0]"),
    ("extra arg on two lines", "strix-halo", [("server", "extraArgs", ["--tags", "a\nb"])], "server.extraArgs[1]"),
    ("extra arg the plan cannot count", "strix-halo", [("server", "extraArgs", ["--no-kv-offload"])], "plan: server.extraArgs[0]"),
    ("vllm extra arg the program renders", "mi300x", [("server", "extraArgs", ["--max_model_len=8192"])], "server.extraArgs[0]"),
    ("vllm extra arg abbreviated", "mi300x", [("server", "extraArgs", ["--max-model", "8192"])], "server.extraArgs[0]"),
    # Options that open the server are the component's refusal: memory.check false changes nothing.
    ("extra arg that runs tools", "strix-halo", [("memory", "check", False), ("server", "extraArgs", ["--tools", "all"])], "server.extraArgs[0]"),
    ("extra arg that serves files", "strix-halo", [("memory", "check", False), ("server", "extraArgs", ["--path", "/"])], "server.extraArgs[0]"),
    ("extra arg that downloads a draft", "strix-halo", [("memory", "check", False), ("server", "extraArgs", ["-hfd", "x/y"])], "server.extraArgs[0]"),
    ("vllm extra arg that loads code", "mi300x", [("memory", "check", False), ("server", "extraArgs", ["--trust-remote-code"])], "server.extraArgs[0]"),
    ("vllm extra arg that serves host files", "mi300x", [("memory", "check", False), ("server", "extraArgs", ["--allowed-local-media-path", "/"])], "server.extraArgs[0]"),
    ("vllm image without digest", "mi300x", [("server", "allowFloatingImage", False)], "server.image"),
    ("empty allowlist", "mi300x", [("caddy", "allowedCidrs", [])], "caddy.allowedCidrs"),
    ("malformed CIDR", "mi300x", [("caddy", "allowedCidrs", ["10.0.0.0/33"])], "caddy.allowedCidrs[0]"),
    ("malformed domain", "mi300x", [("caddy", "site", "-bad-.example")], "caddy.site"),
    ("auto TLS on an IP", "mi300x", [("caddy", "site", "203.0.113.10")], "caddy.tls"),
    ("unknown TLS mode", "mi300x", [("caddy", "tls", "manual")], "caddy.tls"),
    ("relative model dir", "mi300x", [("host", "modelDir", "models")], "host.modelDir"),
    ("bad ssh user", "mi300x", [("host", "user", "Root User")], "host.user"),
    ("bad patch digest", "mi300x", [("patches", "", [{"source": "x.py", "target": "/x.py", "sha256": "abc"}])], "patches[0].sha256"),
    ("missing patch file", "mi300x", [("patches", "", [{"source": "no-such.py", "target": "/x.py", "sha256": "a" * 64}])], "patches[0].source"),
    ("floating caddy image", "mi300x", [("caddy", "image", "caddy:latest")], "caddy.image"),
    ("auto TLS without an e-mail", "mi300x", [("caddy", "acmeEmail", DELETE)], "caddy.acmeEmail"),
    ("e-mail that is not one", "mi300x", [("caddy", "acmeEmail", '"ops"@example.com')], "caddy.acmeEmail"),
    ("model dir with a space", "mi300x", [("host", "modelDir", "/srv/models/my dir")], "host.modelDir"),
    ("model dir not normal", "mi300x", [("host", "modelDir", "/opt//llm")], "host.modelDir"),
    ("IPv6 zone id in the allowlist", "mi300x", [("caddy", "allowedCidrs", ["fe80::1%eth0/128"])], "caddy.allowedCidrs[0]"),
    ("node CIDR with a zone id", "strix-halo", [("network", "allowCidrs", ["fe80::%1/64"])], "network.allowCidrs[0]"),
    ("alias that is no Kubernetes name", "strix-halo", [("server", "alias", "DeepSeek-V4-Flash:UD-IQ1_M")], "server.alias"),
    ("server name too long for its Job", "strix-halo", [("server", "name", "s" * 50)], "server.name"),
    ("store name too long for its Job", "strix-halo", [("store", "name", "m" * 60)], "store.name"),
    ("fetch deadline of nothing", "strix-halo", [("store", "fetchTimeoutHours", 1e-9)], "store.fetchTimeoutHours"),
    ("infinite size", "strix-halo", [("memory", "vramGib", "1e400")], "memory.vramGib"),
    ("node CPU the plan does not know", "strix-halo", [("memory", "nodeCpu", "zen9")], "memory.nodeCpu"),
    ("hub endpoint with credentials", "strix-halo", [("store", "hfEndpoint", "https://user:pw@mirror.example")], "store.hfEndpoint"),
    ("hub endpoint port out of range", "strix-halo", [("store", "hfEndpoint", "https://mirror.example:99999")], "store.hfEndpoint"),
    ("hub endpoint half an IPv6", "strix-halo", [("store", "hfEndpoint", "https://[::1")], "store.hfEndpoint"),
    ("world-open node CIDRs", "strix-halo", [("network", "allowCidrs", ["0.0.0.0/0"])], "network.allowCidrs"),
    ("retired pattern read as a flag", "strix-halo", [("store", "retiredPatterns", ["-rf"])], "store.retiredPatterns[0]"),
    ("bind address that is no address", "strix-halo", [("server", "host", "0.0.0.0; id")], "server.host"),
    ("node selector with a newline", "strix-halo", [("server", "nodeSelector", {"kubernetes.io/hostname": "a\nb"})], "server.nodeSelector.kubernetes.io/hostname"),
    ("served name with backticks", "mi300x", [("server", "servedModelName", "`{touch,PWNED}`")], "server.servedModelName"),
    ("site with a Caddyfile block", "mi300x", [("caddy", "site", "llm.example.com\nhandle { reverse_proxy vllm:8000 }")], "caddy.site"),
    ("allowlist with a zone id", "mi300x", [("caddy", "allowedCidrs", ["fe80::1%$(id)/128"])], "caddy.allowedCidrs[0]"),
    ("world-open allowlist in halves", "mi300x", [("caddy", "allowedCidrs", ["0.0.0.0/1", "128.0.0.0/1"])], "caddy.allowedCidrs"),
    ("no host key", "mi300x", [("host", "hostKey", DELETE)], "host.hostKey"),
    ("host key with a trailer", "mi300x", [("host", "hostKey", "ssh-ed25519 AAAA $(id)")], "host.hostKey"),
    ("model dir ending in ..", "mi300x", [("host", "modelDir", "/opt/llm/models/..")], "host.modelDir"),
    ("model dir in /etc", "mi300x", [("host", "modelDir", "/etc")], "host.modelDir"),
    ("model dir with a substitution", "mi300x", [("host", "modelDir", "/opt/$(x)")], "host.modelDir"),
    ("RAM that overflows bash", "mi300x", [("host", "minRamGib", 1e30)], "host.minRamGib"),
    ("patch from outside the project", "mi300x", [("patches", "", [{"source": "../../etc/passwd", "target": "/x.py", "sha256": "a" * 64}])], "patches[0].source"),
    ("HBM overcommitted", "mi300x", [("server", "kvCacheMemoryBytes", 60_000_000_000)], "plan"),
    ("spec tokens out of range", "mi300x", [("server", "speculative.numSpeculativeTokens", 99)], "server.speculative.numSpeculativeTokens"),
    ("retire pattern matching everything", "strix-halo", [("store", "retiredPatterns", ["*"])], "store.retiredPatterns[0]"),
    ("retire pattern matching the model", "strix-halo", [("store", "retiredPatterns", ["Qwen3.6*.gguf", "DeepSeek-V4-Flash-0731-UD-IQ1_M-*.gguf"])], "store.retiredPatterns[1]"),
    ("retire pattern with a folder", "strix-halo", [("store", "retiredPatterns", ["old/*.gguf"])], "store.retiredPatterns[0]"),
    ("unknown upgrade mode", "strix-halo", [("store", "upgrade", "swap")], "store.upgrade"),
    ("preflight not a boolean", "strix-halo", [("store", "nodePreflight", "yes please")], "store.nodePreflight"),
    ("monitor without metrics", "strix-halo", [("metrics", "enabled", False)], "metrics.serviceMonitor"),
    ("no scraper admitted", "strix-halo", [("metrics", "scrapers", [])], "metrics.scrapers"),
    ("unknown monitor kind", "strix-halo", [("metrics", "monitorKind", "ProbeMonitor")], "metrics.monitorKind"),
    ("scraper namespace with a quote", "strix-halo", [("metrics", "scrapers", [{"namespace": "mon'itoring"}])], "metrics.scrapers[0].namespace"),
    ("scrape interval of nothing", "strix-halo", [("metrics", "scrapeIntervalSeconds", 0)], "metrics.scrapeIntervalSeconds"),
    ("KV alert above 100%", "strix-halo", [("metrics", "alerts.kvCacheRatio", 1.5)], "metrics.alerts.kvCacheRatio"),
    ("monitor label with a newline", "strix-halo", [("metrics", "monitorLabels", {"release": "a\nb"})], "metrics.monitorLabels.release"),
    ("metrics site on the API port", "mi300x", [("metrics", "port", 443)], "metrics.port"),
    ("metrics site open to the world", "mi300x", [("metrics", "allowedCidrs", ["0.0.0.0/0", "::/0"])], "metrics.allowedCidrs"),
    ("metrics site without scrapers", "mi300x", [("metrics", "allowedCidrs", [])], "metrics.allowedCidrs"),
    ("metrics allowlist with a Caddyfile block", "mi300x", [("metrics", "allowedCidrs", ["10.0.0.0/8 }\nhandle {"])], "metrics.allowedCidrs[0]"),
    ("floating GPU exporter", "mi300x", [("metrics", "gpuExporter", {"image": "rocm/device-metrics-exporter:latest"})], "metrics.gpuExporter.image"),
    ("reference figure of zero", "mi300x", [("metrics", "reference.decodeTps", 0)], "metrics.reference.decodeTps"),
    ("unknown runtime", "strix-halo", [("server", "runtime", "metal")], "server.runtime"),
    ("CPU runtime with GPU layers", "strix-halo", [("server", "runtime", "cpu")], "server.gpuLayers"),
    ("image of another backend than the runtime", "strix-halo", [("server", "runtime", "rocm"), ("server", "image", "ghcr.io/ggml-org/llama.cpp:server-vulkan-b11434")], "server.image"),
    ("tuned without a tune record", "strix-halo", [("server", "runtime", "tuned")], "server.runtime"),
    ("declared runtime without rpc for a split", "strix-halo-pair-split", [("server", "image", DELETE), ("server", "runtime", {"name": "mine", "image": "registry.lan/llama.cpp:vk-b11434", "backend": "vulkan"})], "server.runtime"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stack", "edits", "key"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_invalid_stack_exits_2_naming_the_key(
    tmp_path: Path, stack: str, edits: list[Edit], key: str
) -> None:
    lines = render_problems(tmp_path, stack, edits)
    assert any(line.startswith(f"{key}:") for line in lines), lines


def render_warning_of_unclosed_loops(path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`llm-infra render` with Python's resource warnings on, which fails if it leaves an event
    loop open: closed by the interpreter's exit instead, one can print a traceback after the
    program's own lines (seen now and then on a loaded machine)."""
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-m", "infra.cli", "render",
         str(path), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "unclosed event loop" not in result.stderr, result.stderr
    return result


def test_a_rendered_stack_leaves_no_event_loop_open(tmp_path: Path) -> None:
    result = render_warning_of_unclosed_loops(STACKS / "Pulumi.strix-halo.yaml", tmp_path / "r")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("stack", "edits", "key"), [CASES[0][1:], CASES[-1][1:]])
def test_a_refused_stack_leaves_no_event_loop_open(
    tmp_path: Path, stack: str, edits: list[Edit], key: str
) -> None:
    """The refusal path of a fresh interpreter (the cases above run in this process)."""
    path = write_stack(tmp_path / f"Pulumi.{stack}.yaml", edited(stack, edits))
    result = render_warning_of_unclosed_loops(path, tmp_path / "rendered")
    assert result.returncode == 2, result.stdout + result.stderr
    assert any(line.startswith(f"{key}:") for line in result.stderr.splitlines())


def render_problems(tmp_path: Path, stack: str, edits: list[Edit]) -> list[str]:
    """The problem lines of a render that must exit 2 (no traceback, nothing written), run in
    this process (a fresh interpreter's exit: test_a_refused_stack_leaves_no_event_loop_open)."""
    path = write_stack(tmp_path / f"Pulumi.{stack}.yaml", edited(stack, edits))
    # Recorded expectations, for the stacks that ask for the post-up check.
    (tmp_path / f"{stack}.verify.json").write_text('{"version": 1, "cases": []}')
    out = tmp_path / "rendered"
    result = run_cli(["render", str(path), "--out", str(out)], cwd=ROOT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout and not out.exists()
    lines = [line for line in result.stderr.splitlines() if "(preview only" not in line]
    assert lines[0].startswith("llm-infra: invalid configuration in")
    return lines[1:]


RULE_LINES = [
    # A component's own rule, reported in the stack file's words: its key and the other keys
    # its message names (`ref`), never the component's input names.
    (
        "mi300x", [("caddy", "allowedCidrs", ["0.0.0.0/0"])],
        "caddy.allowedCidrs: ['0.0.0.0/0'] together admit every address: list the client "
        "networks, or set caddy.allowWorld to serve the world on purpose",
    ),
    (
        "mi300x", [("caddy", "allowedCidrs", [])],
        "caddy.allowedCidrs: is empty, so nobody could connect: list the client networks (to "
        "admit every address, 0.0.0.0/0 and ::/0 with caddy.allowWorld set)",
    ),
    (
        "mi300x", [("metrics", "allowedCidrs", ["0.0.0.0/1", "128.0.0.0/1", "::/0"])],
        "metrics.allowedCidrs: ['0.0.0.0/1', '128.0.0.0/1', '::/0'] together admit every "
        "address: list the client networks, or set metrics.allowWorld to serve the world on "
        "purpose",
    ),
    (
        "mi300x", [("host", "hostKey", DELETE)],
        "host.hostKey: is required, so that nobody in between can pose as the host and receive "
        "the API key (paste what `ssh-keyscan -t ed25519 HOST` prints, or set "
        "host.insecureIgnoreHostKey to skip the check)",
    ),
    (
        "mi300x", [("host", "insecureIgnoreHostKey", True)],
        "host.insecureIgnoreHostKey: contradicts host.hostKey (drop one of them)",
    ),
    (
        "strix-halo", [("server", "verifyAfterUp", True)],
        "server.verifyAfterUp: is set while store.upgrade stops the server before a model "
        "change: the new server is not awaited (it waits for the fetch that follows it), so the "
        "check would run before it is up (drop one of them; `llm-infra verify` checks by hand)",
    ),
    (
        "strix-halo", [("server", "extraArgs", ["--ctx_size", "4096"])],
        "server.extraArgs[0]: '--ctx_size' (--ctx-size) is rendered from server.contextSize: "
        "set that instead",
    ),
    (
        "mi300x", [("server", "extraArgs", ["--speculative-config.num_speculative_tokens", "3"])],
        "server.extraArgs[0]: '--speculative-config.num_speculative_tokens' "
        "(--speculative-config) is rendered from server.speculative: set that instead",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("stack", "edits", "line"), RULE_LINES)
def test_a_components_rule_is_reported_in_the_stack_files_words(
    tmp_path: Path, stack: str, edits: list[Edit], line: str
) -> None:
    assert line in render_problems(tmp_path, stack, edits)


def test_an_allowlist_of_the_world_renders_with_allow_world(tmp_path: Path) -> None:
    edits: list[Edit] = [
        ("caddy", "allowedCidrs", ["0.0.0.0/0", "::/0"]),
        ("caddy", "allowWorld", True),
    ]
    path = write_stack(tmp_path / "Pulumi.mi300x.yaml", edited("mi300x", edits))
    result = render_warning_of_unclosed_loops(path, tmp_path / "r")
    assert result.returncode == 0, result.stderr


SECRETS = {
    "llm-infra:hfToken": "hf_live_secret_token_abcdef",
    "llm-infra:apiKey": "sk-live-api-key-0123456789",
    "llm-infra:sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nQUJDREVGR0hJSktMTU5PUA==\n",
}


@pytest.mark.parametrize("stack", ["strix-halo", "mi300x"])
def test_secrets_appear_in_no_rendered_file_argv_env_or_log(
    stack: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    document = edited(stack, [("server", "apiKey", True)] if stack == "strix-halo" else [])
    path = write_stack(tmp_path / f"Pulumi.{stack}.yaml", document)
    stack_file = read_stack_file(path)
    config, secret_keys = stack_file.config, stack_file.secret_keys
    config.update(SECRETS)
    rendered = run_program(program.main, config, [*secret_keys, *SECRETS], stack=stack)
    out = tmp_path / "rendered"
    write(rendered, out)
    logs = capfd.readouterr()
    texts = [p.read_bytes().decode(errors="replace") for p in out.rglob("*") if p.is_file()]
    texts += [logs.out, logs.err, json.dumps(rendered.resources), json.dumps(rendered.outputs)]
    for secret in SECRETS.values():
        for fragment in (secret, secret.strip().splitlines()[-1]):
            assert all(fragment not in text for text in texts), fragment
    # Where the secrets went instead: a Kubernetes Secret, or secret stdin of a remote command.
    if stack == "strix-halo":
        secrets = [r for r in rendered.resources if r["type"] == "kubernetes:core/v1:Secret"]
        assert {r["name"] for r in secrets} == {"models-hf-token", "deepseek-v4-flash-0731-api-key"}
        # Each Secret keeps its key names; every value is the placeholder.
        data = sorted(map(json.dumps, (r["inputs"]["stringData"] for r in secrets)))
        assert data == sorted(map(json.dumps, ({"api-key": "[secret]"}, {"token": "[secret]"})))
    else:
        env_file = next(r for r in rendered.resources if r["name"] == "vllm-env-file")
        assert env_file["inputs"]["stdin"] == "[secret]"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("llm-infra:apiKey", "sk-live-with-a-'quote"),
        ("llm-infra:apiKey", "sk-live-two\nlines"),
        ("llm-infra:hfToken", "hf_live with a space"),
        ("llm-infra:hfToken", "hf_live\x00nul"),
        ("llm-infra:sshPrivateKey", "garbage-key-material-xyz"),
    ],
)
def test_a_malformed_secret_is_named_and_never_shown(
    key: str, value: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stack = "mi300x" if key != "llm-infra:hfToken" else "strix-halo"
    stack_file = read_stack_file(STACKS / f"Pulumi.{stack}.yaml")
    config = {**stack_file.config, **SECRETS, key: value}
    with pytest.raises(ConfigError) as raised:
        run_program(program.main, config, [*stack_file.secret_keys, *SECRETS], stack=stack)
    name = key.split(":", 1)[1]
    assert [p for p in raised.value.problems if p.startswith(f"{name}: ")], raised.value.problems
    logs = capfd.readouterr()
    for text in (str(raised.value), logs.out, logs.err):
        assert value not in text and value.strip().split()[0] not in text


def test_a_secret_with_a_trailing_newline_is_stripped(tmp_path: Path) -> None:
    stack_file = read_stack_file(STACKS / "Pulumi.mi300x.yaml")
    config = {**stack_file.config, **SECRETS, "llm-infra:apiKey": "sk-live-key-0123456789\n"}
    rendered = run_program(
        program.main, config, [*stack_file.secret_keys, *SECRETS], stack="mi300x"
    )
    env_file = next(r for r in rendered.resources if r["name"] == "vllm-env-file")
    assert env_file["inputs"]["stdin"] == "[secret]"
