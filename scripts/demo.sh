#!/usr/bin/env bash
# demo.sh — hsbx's main job on every real engine scripts/engines.sh set up:
# a sandbox up, commands in it (state persists between them, exit codes pass
# through, a timeout kills the command in the sandbox), listing, teardown.
# The rootless engine is driven by hsbx running as that engine's user, as a
# real rootless user would. Last, docker on another machine, reached over
# ssh: /workspace kept in the engine's volumes across down and up, a host
# path refused, the volumes gone with down --purge.
# Usage: scripts/demo.sh HSBX   (after `. /tmp/hsbx-engines/env.sh`)
set -uo pipefail
hsbx=$(readlink -f "${1:-bin/hsbx}")
export TERMINAL_DOCKER_IMAGE=${HSBX_IT_IMAGE:-hsbx-busybox}
run() { printf '\n$ hsbx %s\n' "${*:$((skip + 1))}"; "$@"; echo "[exit $?]"; }

demo() { # demo LABEL CMD-PREFIX...
  printf '\n===================== %s\n' "$1"; shift
  h=("$@")
  skip=$((${#h[@]} - 2)) # print from --runtime on
  run "${h[@]}" doctor
  run "${h[@]}" up --task demo --json
  run "${h[@]}" up --task demo --json          # reused: one engine call
  run "${h[@]}" exec --task demo -- sh -c 'echo hello > /tmp/greeting; uname -sr'
  run "${h[@]}" exec --task demo -- cat /tmp/greeting
  run "${h[@]}" exec --task demo -- sh -c 'exit 42'
  run "${h[@]}" exec --task demo --timeout 1s -- sh -c 'sleep 300 & sleep 301'
  run "${h[@]}" exec --task demo -- ps
  run "${h[@]}" ls
  run "${h[@]}" down --task demo
}

remote() { # remote CMD-PREFIX...: the engine reached over ssh
  printf '\n===================== %s\n' "docker on another machine, over ssh ($DOCKER_HOST)"
  h=("$@")
  skip=$((${#h[@]} - 2))
  run "${h[@]}" doctor
  run "${h[@]}" up --task demo --json
  run "${h[@]}" exec --task demo -- sh -c 'echo kept > /workspace/notes; hostname'
  run "${h[@]}" down --task demo
  run "${h[@]}" up --task demo --json
  run "${h[@]}" exec --task demo -- cat /workspace/notes
  run "${h[@]}" ls --volumes
  printf '\n$ TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE=true hsbx up --task other\n'
  TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE=true "${h[@]}" up --task other; echo "[exit $?]"
  run "${h[@]}" down --task demo --purge
  run "${h[@]}" ls --volumes
}

state=$(mktemp -d); chmod 0755 "$state"; trap 'rm -rf "$state"' EXIT
[ -n "${HSBX_IT_DOCKER:-}" ] && XDG_STATE_HOME=$state/root demo "docker (rootful)" "$hsbx" --runtime "$HSBX_IT_DOCKER"
[ -n "${HSBX_IT_PODMAN:-}" ] && XDG_STATE_HOME=$state/root demo "podman (rootful)" "$hsbx" --runtime "$HSBX_IT_PODMAN"
if [ -n "${HSBX_IT_AS_ROOTLESS:-}" ]; then
  install -m 0755 "$hsbx" "$state/hsbx"
  mkdir -p "$state/rootless" && chown "$HSBX_IT_ROOTLESS_UID:$HSBX_IT_ROOTLESS_GID" "$state/rootless"
  XDG_STATE_HOME=$state/rootless/state XDG_CACHE_HOME=$state/rootless/cache \
    demo "podman (rootless, hsbx run as the rootless user)" "$HSBX_IT_AS_ROOTLESS" "$state/hsbx" --runtime podman
fi
if [ -n "${HSBX_IT_DOCKER_SSH:-}" ] && [ -n "${HSBX_IT_SSH_PATH:-}" ] && [ -n "${HSBX_IT_DOCKER:-}" ]; then
  PATH="$HSBX_IT_SSH_PATH:$PATH" DOCKER_HOST=$HSBX_IT_DOCKER_SSH XDG_STATE_HOME=$state/remote \
    remote "$hsbx" --runtime "$HSBX_IT_DOCKER"
fi
