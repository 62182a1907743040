#!/usr/bin/env bash
# capture.sh — record what a real engine prints (stdout, stderr, exit code) for
# every call hsbx makes and every failure it classifies, into
# testdata/engines/<engine>-<version>/<case>.{argv,stdout,stderr,exit}.
# The parser tables and the fake-engine fidelity test read these files.
#
# Usage: scripts/capture.sh BINARY [LABEL]   (after `. /tmp/hsbx-engines/env.sh`)
#        CAPTURE_ONLY=volumes scripts/capture.sh ...: only those cases, the rest kept
set -uo pipefail
bin=${1:?usage: capture.sh BINARY [LABEL]}
image=${HSBX_IT_IMAGE:-hsbx-busybox}
ver=$("$bin" --version | head -1)
case "$ver" in
  podman*) dialect=podman; v=$(echo "$ver" | awk '{print $3}') ;;
  Docker*) dialect=docker; v=$("$bin" version --format '{{.Server.Version}}' 2>/dev/null || echo unknown)
           v="client$(echo "$ver" | awk '{print $3}' | tr -d ,)-engine$v" ;;
  *) echo "unknown engine: $ver" >&2; exit 1 ;;
esac
label=${2:-$dialect-$v}
out="$(cd "$(dirname "$0")/.." && pwd)/testdata/engines/$label"
[ -n "${CAPTURE_ONLY:-}" ] || rm -rf "$out"
mkdir -p "$out"
echo "capturing $bin ($ver) into $out" >&2

cap() { # cap NAME ARGS...   (runs BINARY ARGS..., env from the caller)
  local name=$1; shift
  printf '%s\n' "$@" >"$out/$name.argv"
  "$bin" "$@" >"$out/$name.stdout" 2>"$out/$name.stderr"
  echo $? >"$out/$name.exit"
}

if [ "$dialect" = docker ]; then psfmt='{{json .}}'; else psfmt=json; fi
for c in cap-run cap-exit cap-created cap-paused cap-stop; do "$bin" rm -f "$c" >/dev/null 2>&1; done  # one by one: podman's rm -f with a missing name removes nothing
net=(--network none)

# Volumes (storage = volume): made with labels; a second create (docker
# quiet, podman refuses); inspect with one missing (both print what they
# found); ls by label; a volume run makes without labels; rm refused while
# mounted, and with one missing.
volumes() {
  "$bin" rm -f cap-vol >/dev/null 2>&1; "$bin" volume rm cap-vol-a cap-vol-auto >/dev/null 2>&1
  cap volume_create volume create --label hsbx.key=k --label hsbx.volume=workspace cap-vol-a
  cap volume_create_again volume create --label hsbx.key=k cap-vol-a
  cap volume_inspect volume inspect cap-vol-a
  cap volume_inspect_missing volume inspect cap-vol-a cap-vol-nonexist
  cap volume_inspect_none volume inspect cap-vol-nonexist
  cap volume_ls_label volume ls -q --filter label=hsbx.key=k
  "$bin" run -d --name cap-vol --mount type=volume,source=cap-vol-a,target=/w \
    --mount type=volume,source=cap-vol-auto,target=/v "${net[@]}" "$image" sleep infinity >/dev/null
  cap volume_inspect_auto volume inspect cap-vol-auto
  cap volume_rm_in_use volume rm cap-vol-a
  "$bin" rm -f cap-vol >/dev/null
  cap volume_rm_missing volume rm cap-vol-a cap-vol-nonexist
  cap volume_rm_none volume rm cap-vol-nonexist
  "$bin" volume rm cap-vol-auto >/dev/null 2>&1
}
[ "${CAPTURE_ONLY:-}" = volumes ] && { volumes; echo "done: volumes" >&2; exit 0; }
"$bin" run -d --init --name cap-run --label hermes-agent=1 --label hermes-task-id=t1 \
  --label hermes-profile=default --label 'weird=a,b=c' "${net[@]}" "$image" sleep infinity >/dev/null
"$bin" run --name cap-exit --label hermes-agent=1 "${net[@]}" "$image" sh -c 'exit 3' >/dev/null
"$bin" create --name cap-created --label hermes-agent=1 "${net[@]}" "$image" sleep 1 >/dev/null
"$bin" run -d --name cap-paused "${net[@]}" "$image" sleep infinity >/dev/null
"$bin" pause cap-paused >/dev/null

cap version_flag --version
cap version version --format '{{json .}}'
cap info info --format '{{json .}}'
cap ps_all ps -a --no-trunc --format "$psfmt"
cap ps_label ps -a --no-trunc --format "$psfmt" --filter label=hermes-agent=1 --filter label=hermes-task-id=t1
cap ps_exited ps -a --no-trunc --format "$psfmt" --filter label=hermes-agent=1 --filter status=exited
cap ps_none ps -a --no-trunc --format "$psfmt" --filter label=hermes-agent=nothing-has-this
cap inspect_all container inspect cap-run cap-exit cap-created cap-paused
cap inspect_missing container inspect cap-run cap-nonexist
cap inspect_none container inspect cap-nonexist
cap start_missing start cap-nonexist
cap start_running start cap-run
cap stop_missing stop cap-nonexist
cap stop_stopped stop cap-exit
cap rm_missing_force rm -f cap-nonexist
cap rm_missing rm cap-nonexist
cap rm_running rm cap-run
cap rm_multi rm -f cap-created cap-nonexist
cap run_name_in_use run -d --name cap-run "${net[@]}" "$image" true
cap run_bad_image run -d --name cap-bad "${net[@]}" nosuchimage:1 true
cap run_bad_flag run --bogus "$image"
cap run_unknown_runtime run -d --name cap-no-runtime --runtime hsbx-no-such-runtime "${net[@]}" "$image" true
cap run_missing_runtime_path run -d --name cap-no-runtime --runtime /nonexistent/runsc "${net[@]}" "$image" true
cap exec_missing exec cap-nonexist true
cap exec_stopped exec cap-exit true
cap exec_paused exec cap-paused true
cap exec_not_found exec cap-run nosuchcmd
cap exec_not_executable exec cap-run /etc/passwd
cap exec_exit125 exec cap-run sh -c 'exit 125'
cap exec_exit1 exec cap-run sh -c 'echo out; echo err >&2; exit 1'
cap exec_bad_workdir exec -w /nonexist cap-run true
cap unpause_running unpause cap-run
cap pause_paused pause cap-paused
cap image_inspect image inspect "$image"
cap image_inspect_missing image inspect nosuchimage:1
cap pull_missing pull -- nosuchimage:1
# A command's own stderr that reads like the engine's: the engine passes
# the command's words and status through while the container runs (hsbx
# must ask the engine, never trust the words).
if [ "$dialect" = docker ]; then
  cap exec_words_notfound exec cap-run sh -c 'echo run; echo "Error response from daemon: No such container: x" >&2; exit 1'
else
  cap exec_words_notfound exec cap-run sh -c 'echo run; echo "Error: no container with name or ID x found: no such container" >&2; exit 125'
fi
# Copies: a missing path in the container, out and in (its parent), and a
# tar stream into a directory that does not exist.
cap cp_out_missing cp -- cap-run:/nonexist/file "$out/.cp-dst"
cap cp_out_missing_stream cp cap-run:/nonexist/file -
cap cp_in_missing_parent cp -- /etc/passwd cap-run:/nonexist/dir/file
cap cp_in_stream_missing_dir cp - cap-run:/nonexist </dev/null
rm -rf "$out/.cp-dst"
# A live exec session shows in inspect's ExecIDs (null / [] when none).
"$bin" exec cap-run sleep 3 >/dev/null 2>&1 &
sleep 1.5
cap inspect_exec_live container inspect cap-run
wait
"$bin" run -d --name cap-stop "${net[@]}" "$image" sleep infinity >/dev/null
cap stop_running stop -t 1 cap-stop
cap rm_stopped rm cap-stop
"$bin" create --name cap-batch1 "${net[@]}" "$image" true >/dev/null
"$bin" run -d --name cap-batch2 "${net[@]}" "$image" sleep infinity >/dev/null
"$bin" create --name cap-batch3 "${net[@]}" "$image" true >/dev/null
cap rm_batch_running rm cap-batch1 cap-batch2 cap-batch3
cap rm_batch_missing rm cap-batch2 cap-nonexist
cap ps_after_batch ps -a --no-trunc --format "$psfmt" --filter name=cap-batch
for c in cap-batch1 cap-batch2 cap-batch3; do "$bin" rm -f "$c" >/dev/null 2>&1; done
for c in cap-run cap-exit cap-created cap-paused cap-stop; do "$bin" rm -f "$c" >/dev/null 2>&1; done  # one by one: podman's rm -f with a missing name removes nothing

# Snapshots: commit (docker prints the id; podman too, with -q; a rootless
# podman on cgroups v1 cannot pause), the images with a label, and image rm
# refused for an image a container is made from, by name only untagging
# one another image stands on, and of none.
"$bin" rm -f cap-snap cap-snap2 >/dev/null 2>&1
"$bin" image rm cap-snapshot:two cap-snapshot:one cap-snapshot:zero >/dev/null 2>&1
q=(); [ "$dialect" = podman ] && q=(-q)
"$bin" run -d --name cap-snap --label hsbx.key=k "${net[@]}" "$image" sleep infinity >/dev/null
cap commit_pause commit --pause=true "${q[@]}" cap-snap cap-snapshot:zero
cap commit commit --pause=false "${q[@]}" --change 'LABEL hsbx.snapshot=cap' --change 'LABEL hsbx.key=""' --change 'ENV SECRET=""' cap-snap cap-snapshot:one
cap image_ls_label image ls -q --no-trunc --filter label=hsbx.snapshot=cap
cap image_inspect_commit image inspect cap-snapshot:one
"$bin" run -d --name cap-snap2 "${net[@]}" cap-snapshot:one sleep infinity >/dev/null
cap image_rm_in_use image rm cap-snapshot:one
"$bin" commit "${q[@]}" cap-snap2 cap-snapshot:two >/dev/null
"$bin" rm -f cap-snap2 >/dev/null
cap image_rm_child image rm cap-snapshot:one
cap image_rm_missing image rm cap-snapshot:nonexist
cap commit_missing commit "${q[@]}" cap-nonexist cap-snapshot:three
"$bin" rm -f cap-snap >/dev/null 2>&1
"$bin" image rm cap-snapshot:two cap-snapshot:zero >/dev/null 2>&1
"$bin" image rm cap-snapshot:one >/dev/null 2>&1

volumes

# The engine out of reach.
if [ "$dialect" = docker ]; then
  DOCKER_HOST=unix:///nonexistent/docker.sock cap down_ps ps -a --no-trunc --format "$psfmt"
  DOCKER_HOST=unix:///nonexistent/docker.sock cap down_version version --format '{{json .}}'
  DOCKER_HOST=unix:///nonexistent/docker.sock cap down_info info --format '{{json .}}'
  DOCKER_HOST=unix:///nonexistent/docker.sock cap down_run run -d "$image" true
  DOCKER_HOST=unix:///nonexistent/docker.sock cap down_exec exec x true
else
  CONTAINER_HOST=unix:///nonexistent/podman.sock cap down_ps --remote ps -a --format json
  CONTAINER_HOST=unix:///nonexistent/podman.sock cap down_info --remote info --format json
  CONTAINER_HOST=unix:///nonexistent/podman.sock cap down_exec --remote exec x true
fi
echo "done: $(ls "$out" | wc -l) files" >&2
