bash -c "$(cat <<'LLM_INFRA_SCRIPT'
#!/usr/bin/env bash
set -euo pipefail
# compose.yaml sha256 42b08b1e49b4bc5a93c1a8dff4a492528bc896c32baa7933c6e8d93bf8791269
docker compose -f /opt/llm/compose.yaml -p llm up -d --wait \
  --wait-timeout 3600 --remove-orphans
LLM_INFRA_SCRIPT
)"
