"""Load logs of llama-server b11434 under each CPU variant this machine runs, for the plan's repack.

    python3 -m bench.cpu_variant_logs --build ROOT --cases CASES.json --out DIR [--variant V ...]

Standard library only, so it runs on any machine with a copy of `scripts/build-llama`'s build
(``ROOT/bin``, ``ROOT/cpu``): the machines with AMX that CI may land on, or a GPU machine's host
CPU. ``CASES.json`` is a list of ``{"name", "model", "args"}`` (the calibration cases of
tests/contract/test_plan_calibration.py: a tiny model and its `-c`/`-np`/cache flags). For each
case and variant it starts llama-server with ``-lv 4``, waits for /health, asks for one token
(a crash at the first decode shows there), and keeps the log as ``DIR/<case>.<variant>.log``;
it prints each model buffer the log reports and how the server ended. Logs of variants this
CPU cannot run are not written (ggml refuses them: "is not supported on this system").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

_MODEL = re.compile(r"load_tensors: +(\S+) model buffer size = +([0-9.]+) MiB")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _post(url: str, body: dict[str, object], timeout: float) -> int:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        status: int = response.status
        return status


def run_case(
    root: Path, variant: str, case: dict[str, object], log_path: Path, timeout: float = 120.0
) -> str:
    """Boot, one token, stop; the outcome as a word (`ok`, `unsupported`, `exit N`, ...)."""
    port = _free_port()
    env = {
        **os.environ,
        "GGML_BACKEND_PATH": str(root / "cpu" / f"libggml-cpu-{variant}.so"),
        "LD_LIBRARY_PATH": str(root / "bin"),
    }
    args = [str(a) for a in case["args"]]  # type: ignore[attr-defined]
    argv = [str(root / "bin" / "llama-server"), "-m", str(case["model"]), "--port", str(port)]
    argv += ["--host", "127.0.0.1", "-lv", "4", *args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    text = log_path.read_text(errors="replace")
                    if "is not supported on this system" in text:
                        return "unsupported"
                    return f"exit {process.returncode} at load"
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/health", timeout=2
                    ) as response:
                        if response.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(0.1)
            else:
                return "not healthy"
            try:
                _post(
                    f"http://127.0.0.1:{port}/completion",
                    {"prompt": "Hello", "n_predict": 1},
                    timeout=60,
                )
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                time.sleep(0.5)
                code = process.poll()
                return f"exit {code} at the first decode" if code is not None else f"error {exc}"
            return "ok"
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def main() -> None:
    """Run every case under every variant and print the buffers each log reports."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, required=True, help="scripts/build-llama's root")
    p.add_argument("--cases", type=Path, required=True, help="JSON list of {name, model, args}")
    p.add_argument("--out", type=Path, required=True, help="where the load logs go")
    p.add_argument("--variant", action="append", help="only these variants (default: all)")
    options = p.parse_args()
    cases = json.loads(options.cases.read_text())
    variants = options.variant or sorted(
        path.name[len("libggml-cpu-") : -len(".so")]
        for path in (options.build / "cpu").glob("libggml-cpu-*.so")
    )
    options.out.mkdir(parents=True, exist_ok=True)
    for variant in variants:
        for case in cases:
            log_path = options.out / f"{case['name']}.{variant}.log"
            outcome = run_case(options.build, variant, case, log_path)
            if outcome == "unsupported":
                log_path.unlink()
                print(f"{variant:<15} not supported by this CPU")
                break
            buffers = _MODEL.findall(log_path.read_text(errors="replace"))
            shown = ", ".join(f"{name} {size}" for name, size in buffers)
            print(f"{variant:<15} {case['name']:<24} {outcome:<28} {shown}")


if __name__ == "__main__":
    main()
