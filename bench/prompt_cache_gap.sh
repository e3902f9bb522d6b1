#!/usr/bin/env bash
# The bench's concurrency levels on the rendered strix-halo argv, with the default prompt cache
# and with `--cache-ram 0`: the wall time per request outside llama-server's own timings (the
# aggregate's gap to the server-side figure) is the prompt cache's save and lookup when it
# vanishes without it.
#
#   bash bench/prompt_cache_gap.sh [LLAMA_SERVER]     (default: /opt/llama/bin/llama-server)
#
# Needs python3 with numpy and gguf (for the 43-layer test model); the bench itself is stdlib.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:-/opt/llama/bin/llama-server}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=8090
python3 - "$work" "$port" <<'PY'
import json
import sys
from pathlib import Path

from bench import gpu_run
from tests.support.tiny_gguf import LLAMA43_SPEC, write_tiny_model

work, port = Path(sys.argv[1]), sys.argv[2]
argv = gpu_run.argv_from_render(Path("tests/golden/strix-halo/resources.json"))
model = write_tiny_model(work / "llama43", "llama43", 3, LLAMA43_SPEC)[0]
argv = gpu_run.replace_value(argv, "-m", str(model))
argv = gpu_run.replace_value(argv, "--port", port)
argv = gpu_run.replace_value(argv, "--log-file", str(work / "llama-server.log"))
(work / "argv.json").write_text(json.dumps(argv))
PY
mapfile -t args < <(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))))' "$work/argv.json")
for extra in default 0; do
  cache=()
  label="(default --cache-ram)"
  [ "$extra" = default ] || { cache=(--cache-ram "$extra"); label="--cache-ram $extra"; }
  "$binary" "${args[@]}" "${cache[@]}" >"$work/console.log" 2>&1 &
  pid=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 1
  done
  echo "===== rendered argv $label"
  python3 -m bench.serve "http://127.0.0.1:$port" --decode-requests 3 --prefill-requests 2 \
    --concurrency 1,8,64 | grep -E "aggregate|outside|measured"
  kill "$pid"
  wait "$pid" || true
done
