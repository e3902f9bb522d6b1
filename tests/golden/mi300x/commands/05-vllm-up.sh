bash -c "$(cat <<'LLM_INFRA_SCRIPT'
#!/usr/bin/env bash
set -euo pipefail
# compose.yaml sha256 f4ba1a0f87e91671e6a0f69a4bd876f3b11231493e8325a54531fc137012407e
docker compose -f /opt/llm/compose.yaml -p llm up -d --wait \
  --wait-timeout 3600 --remove-orphans
LLM_INFRA_SCRIPT
)"
