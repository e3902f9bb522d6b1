#!/usr/bin/env bash
set -euo pipefail
umask 077
mkdir -p /opt/llm
cat > /opt/llm/vllm.env.new
chmod 600 /opt/llm/vllm.env.new
if cmp -s /opt/llm/vllm.env.new /opt/llm/vllm.env; then
  rm -f /opt/llm/vllm.env.new
  echo "env file unchanged"
  exit 0
fi
mv -f /opt/llm/vllm.env.new /opt/llm/vllm.env
echo "env file written"
# vLLM reads its key only at start: apply a rotated key to a running server now.
running=$(docker compose -f /opt/llm/compose.yaml -p llm ps -q vllm 2>/dev/null || true)
if [ -n "$running" ]; then
  docker compose -f /opt/llm/compose.yaml -p llm up -d --wait vllm
fi
