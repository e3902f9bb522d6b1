"""Standard-library scripts shipped into pods and hosts, and where they are mounted there.

Each shipped file runs as it is in a stock Python image (the fetch Job, the verify Job, the
MI300X host, the metrics proxy beside llama-server); most are also the back-end of an
`llm-infra` command. The benchmark (`bench`, `bench_client`, `bench_report`) and the GPU gate's
log check are back-ends only, which a GPU machine's plain Python imports from here. A shipped
script imports the modules shipped beside it by their file names (`import http_policy`): run
as `python3 SCRIPT` (never with `-I` or `-P`), its own folder is first on the path; imported as
``components.payloads.NAME``, it imports them from this package.
"""

from pathlib import Path

_HERE = Path(__file__).parent
FETCHER_FILE = "fetcher.py"
"""The fetcher's file name where it is shipped."""
FETCHER_SOURCE = _HERE / FETCHER_FILE
"""The model fetcher (`llm-infra fetch`, `llm-infra check-model`)."""
LOCK_FILE = "lock.json"
"""The lock's file name beside a shipped fetcher.py (its `--lock`)."""
DRAFT_LOCK_FILE = "draft-lock.json"
"""The speculative draft's lock beside it (the draft's fetch and check)."""
VERIFY_SOURCE = _HERE / "verify.py"
"""The answer check (`llm-infra verify`)."""
PROPS_SOURCE = _HERE / "props.py"
"""The server-properties check verify imports: shipped beside it."""
PROPS_FILE = "props.py"
"""Its file name beside a shipped verify.py (the name verify imports it by)."""
EXPECTED_PROPS_FILE = "props.json"
"""The rendered server properties beside a shipped verify.py (`--props`)."""
HTTP_POLICY_SOURCE = _HERE / "http_policy.py"
"""The HTTP client policy the fetcher and verify import: shipped beside them."""
HTTP_POLICY_FILE = "http_policy.py"
"""Its file name beside a shipped fetcher.py or verify.py (the name they import it by)."""
METRICS_PROXY_SOURCE = _HERE / "metrics_proxy.py"
"""The metrics-only proxy beside llama-server (scrapers reach /metrics, never the API)."""
METRICS_PROXY_MOUNT = "/opt/llm-infra-metrics"
"""Where the proxy's container finds metrics_proxy.py."""
FETCHER_MOUNT = "/opt/llm-infra"
"""Where a container finds the fetcher and its lock."""
VERIFY_MOUNT = "/opt/llm-infra-verify"
"""Where a container finds verify.py and its expectations."""


def shipped_modules(name: str) -> dict[str, str]:
    """A payload module and every payload module it imports, transitively, by their path in a
    checkout (`components/payloads/NAME.py`) → source: what a stock Python needs beside it to
    import ``components.payloads.NAME``. The package's ``components/__init__.py`` is shipped
    empty (the real one imports the Pulumi components); this package's own is shipped as is."""
    import ast

    sources = {"components/__init__.py": "", "components/payloads/__init__.py": ""}
    sources["components/payloads/__init__.py"] = (_HERE / "__init__.py").read_text()
    todo = [name]
    while todo:
        module = todo.pop()
        path = f"components/payloads/{module}.py"
        if path in sources:
            continue
        text = (_HERE / f"{module}.py").read_text()
        sources[path] = text
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "components.payloads":
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "components.payloads."
            ):
                todo.append(str(node.module).rsplit(".", 1)[1])
            elif isinstance(node, ast.Import):
                todo += [
                    a.name.rsplit(".", 1)[1]
                    for a in node.names
                    if a.name.startswith("components.payloads.")
                ]
    return sources
