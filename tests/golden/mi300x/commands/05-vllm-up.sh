#!/usr/bin/env bash
set -euo pipefail
# compose.yaml sha256 8f2f432615dd361e7d0094e6ea8d50ab356a3dc7a87042c2df20cfc0b7bdf66f
docker compose -f /opt/llm/compose.yaml -p llm up -d --wait \
  --wait-timeout 3600 --remove-orphans
