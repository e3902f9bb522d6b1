#!/usr/bin/env bash
set -euo pipefail
# after up d64965a734716b50d499334e6339569ca72007c0581fdbba0c108707f838ad3d
# Through Caddy on its container loopback (allowed); retried while a cert is issued.
for attempt in $(seq 1 30); do
  if docker compose -f /opt/llm/compose.yaml -p llm exec -T caddy wget -q -O /dev/null \
    --header 'Host: llm.example.com' https://127.0.0.1/health; then
    echo "caddy -> vllm /health: ok"
    break
  fi
  if [ "$attempt" -eq 30 ]; then
    echo "check: /health through Caddy failed 30 times" >&2
    exit 1
  fi
  sleep 10
done
# The key stays in the container's environment: no argv ever holds it.
docker compose -f /opt/llm/compose.yaml -p llm exec -T vllm \
  python3 -c 'import json, os, sys, urllib.request as u; port, name = int(sys.argv[1]), sys.argv[2]; r = u.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": "Bearer " + os.environ["VLLM_API_KEY"]}); ids = [m["id"] for m in json.load(u.urlopen(r, timeout=30))["data"]]; assert name in ids, ids; print("served:", ids)' 8000 deepseek-v4-flash-0731
