#!/usr/bin/env bash
set -euo pipefail
echo "patches: none to verify"
