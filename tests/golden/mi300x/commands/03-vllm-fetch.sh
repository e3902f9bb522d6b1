#!/usr/bin/env bash
set -euo pipefail
# lock sha256 b88fa26e3d875822626461f24899ee3c4f68f0c27677c5f1d91b2c3579b40913, fetcher sha256 c0e2f169ed97a1ee8706e264e5bab6b85a37b296c46eae4a0491170f6390f571
mkdir -p /opt/llm/models/DeepSeek-V4-Flash-0731
# As the SSH user, so the model files are not root's.
docker run --rm --user "$(id -u):$(id -g)" --network host \
  -e PYTHONUNBUFFERED=1 \
  -v /opt/llm/fetcher.py:/opt/llm-infra/fetcher.py:ro \
  -v /opt/llm/http_policy.py:/opt/llm-infra/http_policy.py:ro \
  -v /opt/llm/model.lock.json:/opt/llm-infra/lock.json:ro \
  -v /opt/llm/models/DeepSeek-V4-Flash-0731:/models \
  python:3.12.8-slim-bookworm \
  python3 /opt/llm-infra/fetcher.py fetch --lock /opt/llm-infra/lock.json \
  --dest /models --parallel 3
