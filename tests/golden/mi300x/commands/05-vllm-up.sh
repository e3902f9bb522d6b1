bash -c "$(cat <<'LLM_INFRA_SCRIPT'
#!/usr/bin/env bash
set -euo pipefail
# compose.yaml sha256 4c6c278013be946719352f09ed79117f5aa6224fc888f7d8f2315f9d62fcdd76
docker compose -f /opt/llm/compose.yaml -p llm up -d --wait \
  --wait-timeout 3600 --remove-orphans
LLM_INFRA_SCRIPT
)"
