bash -c "$(cat <<'LLM_INFRA_SCRIPT'
#!/usr/bin/env bash
set -euo pipefail
status=0
verify() {
  if [ ! -f "$1" ]; then
    echo "patch $1: missing on the host" >&2
    return 1
  fi
  local actual
  actual=$(sha256sum "$1" | awk '{ print $1 }')
  if [ "$actual" != "$2" ]; then
    echo "patch $1: sha256 $actual, the config pins $2: stopping" >&2
    return 1
  fi
  echo "patch $1: sha256 ok"
}
exit "$status"
LLM_INFRA_SCRIPT
)"
