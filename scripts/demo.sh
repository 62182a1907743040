#!/usr/bin/env bash
# demo.sh — show hsbx on every real engine scripts/engines.sh set up.
# Usage: scripts/demo.sh [HSBX]   (after `. /tmp/hsbx-engines/env.sh`)
set -euo pipefail
hsbx=${1:-hsbx}
run() { printf '\n$ %s\n' "$*"; "$@"; }

for bin in "$HSBX_IT_DOCKER" "$HSBX_IT_PODMAN" "$HSBX_IT_PODMAN_ROOTLESS"; do
  [ -n "$bin" ] || continue
  printf '\n===== %s\n' "$bin"
  run "$hsbx" --runtime "$bin" doctor
done
