#!/usr/bin/env bash
set -euo pipefail
problems=0
problem() { echo "preflight: $*" >&2; problems=$((problems + 1)); }
gib() { awk -v k="$1" 'BEGIN { printf "%.1f GiB", k / 1048576 }'; }
if ! command -v docker >/dev/null 2>&1; then
  problem "docker is not installed"
elif ! docker info >/dev/null 2>&1; then
  problem "docker daemon not reachable as $(id -un) (is it running? docker group?)"
else
  compose=$(docker compose version --short 2>/dev/null || true)
  case "$compose" in
    v2.* | 2.* | v[3-9].* | [3-9].*) ;;
    *) problem "docker compose v2 is required (found: ${compose:-none})" ;;
  esac
fi
[ -e /dev/kfd ] || problem "/dev/kfd is missing (amdgpu kernel driver not loaded?)"
[ -d /dev/dri ] || problem "/dev/dri is missing (no GPU render nodes)"
for dir in /opt/llm /opt/llm/patches /opt/llm/models/DeepSeek-V4-Flash-0731; do
  if ! mkdir -p "$dir" 2>/dev/null || [ ! -w "$dir" ]; then
    problem "$dir: not writable by $(id -un)"
  fi
done
if [ -d /opt/llm/models/DeepSeek-V4-Flash-0731 ]; then
  free_kib=$(df -Pk /opt/llm/models/DeepSeek-V4-Flash-0731 | awk 'NR == 2 { print $4 }')
  # The model already downloaded counts as free: a re-run must not fail on it.
  have_kib=$(du -sk /opt/llm/models/DeepSeek-V4-Flash-0731 | awk '{ print $1 }')
  need_kib=230686720
  if [ $((free_kib + have_kib)) -lt "$need_kib" ]; then
    problem "disk: $(gib "$free_kib") free + $(gib "$have_kib") already in /opt/llm/models/DeepSeek-V4-Flash-0731, need $(gib "$need_kib")"
  fi
fi
ram_kib=$(free -k | awk '/^Mem:/ { print $2 }')
need_ram_kib=241172480
if [ "${ram_kib:-0}" -lt "$need_ram_kib" ]; then
  problem "RAM: $(gib "${ram_kib:-0}") installed, need $(gib "$need_ram_kib")"
fi
if [ "$problems" -gt 0 ]; then
  echo "preflight: $problems problem(s); nothing was started" >&2
  exit 1
fi
echo "preflight: ok"
