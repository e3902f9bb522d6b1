"""Model fetch speed on loopback: the fetcher next to curl (and aria2c when installed).

    python3 -m bench.fetch [--gib 2] [--shards 3]

Serves a generated shard set from the hub emulator in this process and prints wall time and
MiB/s for: the fetcher with files in parallel and one at a time (download + sha256 in one pass),
curl sequentially (download only), curl followed by sha256sum, and re-checking a complete set
with and without current verified-hash records. Figures, not asserts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from components.payloads import FETCHER_SOURCE
from tests.support.hub_emulator import Hub, running_hub

REPO = "bench/Shards-GGUF"


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="total size of the shard set")
    parser.add_argument("--shards", type=int, default=3)
    args = parser.parse_args()
    size = int(args.gib * 2**30 / args.shards)
    names = [f"Bench-{i:05d}-of-{args.shards:05d}.gguf" for i in range(1, args.shards + 1)]
    files = {f"Q/{name}": os.urandom(size) for name in names}
    total_mib = size * args.shards / 2**20
    lock = {
        "version": 1,
        "repo": REPO,
        "revision": "main",
        "files": [
            {"path": p, "name": p[2:], "size": size, "sha256": hashlib.sha256(d).hexdigest()}
            for p, d in files.items()
        ],
    }
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp, running_hub(Hub(repos={REPO: files})) as hub:
        work = Path(tmp)
        lock_file = work / "lock.json"
        lock_file.write_text(json.dumps(lock))
        env = {**os.environ, "HF_ENDPOINT": hub.url}
        fetch = [sys.executable, str(FETCHER_SOURCE), "fetch", "--lock", str(lock_file)]
        urls = [f"{hub.url}/{REPO}/resolve/main/{p}" for p in files]

        for parallel in (args.shards, 1):
            dest = work / f"fetch-{parallel}"
            rows.append(
                (
                    f"fetcher, {parallel} file(s) at once, + sha256",
                    timed([*fetch, "--dest", str(dest), "--parallel", str(parallel)], env),
                )
            )
            if parallel == 1:
                rows.append(
                    (
                        "re-check complete set (records current)",
                        timed([*fetch, "--dest", str(dest)], env),
                    )
                )
                shutil.rmtree(dest / ".llm-infra" / "verified")
                rows.append(
                    (
                        "re-check complete set (no records: hash once)",
                        timed([*fetch, "--dest", str(dest)], env),
                    )
                )
            shutil.rmtree(dest)

        curl_dir = work / "curl"
        curl_dir.mkdir()
        curl = ["curl", "-sS", "--fail"]
        for url, name in zip(urls, names, strict=True):
            curl += ["-o", str(curl_dir / name), url]
        curl_s = timed(curl)
        rows.append(("curl, sequential, download only", curl_s))
        sha_s = timed(["sha256sum", *[str(curl_dir / n) for n in names]])
        rows.append(("curl, then sha256sum", curl_s + sha_s))
        if shutil.which("aria2c"):
            aria_dir = work / "aria"
            aria = ["aria2c", "-q", "-x4", "-d", str(aria_dir), *urls]
            rows.append(("aria2c -x4, then sha256sum", timed(aria) + sha_s))
        else:
            rows.append(("aria2c -x4 (not installed)", float("nan")))

    curl_time = dict(rows)["curl, sequential, download only"]
    print(
        f"shard set: {args.shards} x {size / 2**20:.0f} MiB = {total_mib / 1024:.2f} GiB, loopback"
    )
    print(f"{'run':<48} {'seconds':>8} {'MiB/s':>8} {'x curl time':>11}")
    for label, seconds in rows:
        rate = total_mib / seconds if seconds == seconds and seconds > 0 else float("nan")
        print(f"{label:<48} {seconds:>8.2f} {rate:>8.0f} {seconds / curl_time:>11.2f}")


if __name__ == "__main__":
    main()
