#!/usr/bin/env bash
# engines.sh — install and start real Docker Engine and Podman (rootful and
# rootless) on a fresh Debian machine with no container registry, and import a
# busybox image into each — and an arm64 one, run through qemu-user (binfmt),
# for sandboxes of another architecture — and gVisor (Debian's runsc), which
# dockerd knows as the runtime "runsc" and podman runs by its path — and a
# dockerd this machine reaches only over ssh (engines-remote.sh). Idempotent:
# a second run reuses what is there.
#
# Everything the engines hold lives under DIR: dockerd's data root, and
# podman's storage (rootful and rootless, by storage.conf files of this
# script's), apart from the machine's own podman containers and images.
#
# Usage (as root):  scripts/engines.sh [DIR]          (DIR defaults to /tmp/hsbx-engines)
#                   scripts/engines.sh --fresh [DIR]  (the same, first emptied of every
#                                                     container, volume and image that
#                                                     earlier runs left: CI's start)
#                   scripts/engines.sh --stop [DIR]   (stops the dockerd it started)
# Afterwards:       . DIR/env.sh                      (DOCKER_HOST, CONTAINERS_CONF, HSBX_IT_*)
set -euo pipefail

if [ "${1:-}" = --stop ]; then
  dir=${2:-${HSBX_ENGINES_DIR:-/tmp/hsbx-engines}}
  if [ -f "$dir/dockerd.pid" ]; then
    pid=$(cat "$dir/dockerd.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  bash "$(dirname "${BASH_SOURCE[0]}")/engines-remote.sh" --stop "$dir"
  exit 0
fi

fresh=
if [ "${1:-}" = --fresh ]; then
  fresh=1
  shift
fi
dir=${1:-${HSBX_ENGINES_DIR:-/tmp/hsbx-engines}}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=hsbx-busybox
user=hsbxci

say() { printf 'engines: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# empty NAME CLI...: with --fresh, remove every container, pod, volume and
# image the engine holds (this script's own dockerd and podman storage:
# nothing of the machine's), and say how many there were: what earlier
# runs left makes every later engine call slower (podman reads them all).
empty() {
  [ -n "$fresh" ] || return 0
  local name=$1 c v i
  shift
  c=$("$@" ps -aq 2>/dev/null | wc -l)
  v=$("$@" volume ls -q 2>/dev/null | wc -l)
  i=$("$@" image ls -q 2>/dev/null | sort -u | wc -l)
  say "$name held $c containers, $v volumes and $i images from earlier runs: removing them (--fresh)"
  if [ "$name" = docker ]; then
    "$@" ps -aq | xargs -r "$@" rm -f >/dev/null
  else
    "$@" pod rm -af >/dev/null 2>&1 || true
    "$@" rm -af -t 0 >/dev/null
  fi
  "$@" volume ls -q | xargs -r "$@" volume rm -f >/dev/null
  "$@" image ls -q | sort -u | xargs -r "$@" rmi -f >/dev/null 2>&1 || true
  c=$("$@" ps -aq | wc -l)
  [ "$c" = 0 ] || die "$name still holds $c containers after emptying it"
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts dockerd)"

need_pkgs=()
# zsh: not an engine, but the shell the completion tests load hsbx's code in.
# openssh-server: the engine reached only over ssh (engines-remote.sh).
for p in podman runc catatonit docker.io busybox-static uidmap slirp4netns fuse-overlayfs qemu-user-static zsh runsc iproute2 openssh-server; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  say "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

mkdir -p "$dir"
conf="$dir/containers.conf"
cp "$here/containers.conf" "$conf"
chmod 0644 "$conf"
export CONTAINERS_CONF="$conf"

# --- podman's storage: under DIR, rootful and rootless -----------------------
# The storage driver each had when podman chose it on this machine kind:
# overlay for root, vfs for the rootless user (no /dev/fuse for
# fuse-overlayfs). The rootless user's directory is made below, with the user.
storage="$dir/storage.conf"
storage_rootless="$dir/storage-rootless.conf"
mkdir -p "$dir/podman"
chmod 0755 "$dir/podman"
cat >"$storage" <<CONF
# written by scripts/engines.sh: the project's rootful podman keeps its
# containers and images here (CONTAINERS_STORAGE_CONF), not in the machine's.
[storage]
driver = "overlay"
graphroot = "$dir/podman/root"
runroot = "$dir/podman/run"
CONF
# (runroot is the one rootless podman takes by default, in the user's
# XDG_RUNTIME_DIR; podman commit fails without graphroot and runroot:
# "runroot must be set", "graphroot must be set".)
cat >"$storage_rootless" <<CONF
# written by scripts/engines.sh: the project's rootless podman user keeps its
# containers and images here, not in its home.
[storage]
driver = "vfs"
runroot = "$dir/rootless-run/containers"
graphroot = "$dir/podman/rootless"
rootless_storage_path = "$dir/podman/rootless"
CONF
chmod 0644 "$storage" "$storage_rootless"
export CONTAINERS_STORAGE_CONF="$storage"

# --- gVisor: Debian's runsc behind the project's wrapper (see there) -------
gvisor="$dir/gvisor/runsc"
mkdir -p "$dir/gvisor"
install -m 0755 "$here/gvisor-runsc" "$gvisor.new"
mv -f "$gvisor.new" "$gvisor"
chmod 0755 "$dir/gvisor"

# --- Docker Engine: a private dockerd on its own socket ----------------------
# With a bridge of its own (hsbxdock0, made here), so a sandbox with network
# = true has a real interface and reaches the host's services (a test that
# network = false reaches nothing proves nothing otherwise). Not docker0: a
# dockerd started with --bridge=none (the live-restore test's) deletes
# docker0. --iptables=false: no NAT, nothing is forwarded off this machine.
sock="$dir/docker.sock"
export DOCKER_HOST="unix://$sock"
dockercli=/usr/bin/docker
bridge=hsbxdock0
if ! ip link show "$bridge" >/dev/null 2>&1; then
  ip link add "$bridge" type bridge
  ip addr add 172.31.0.1/16 dev "$bridge"
fi
ip link set "$bridge" up
if "$dockercli" version >/dev/null 2>&1 && { ! "$dockercli" info --format '{{json .Runtimes}}' | grep -q '"runsc"' ||
  [ "$("$dockercli" network inspect bridge --format '{{index .Options "com.docker.network.bridge.name"}}' 2>/dev/null)" != "$bridge" ]; }; then
  say "restarting dockerd: it runs without the runtime runsc or without its bridge $bridge"
  bash "$0" --stop "$dir"
fi
if ! "$dockercli" version >/dev/null 2>&1; then
  say "starting dockerd on $sock"
  mkdir -p "$dir/docker-data" "$dir/docker-exec"
  nohup setsid dockerd --host "$DOCKER_HOST" --data-root "$dir/docker-data" \
    --exec-root "$dir/docker-exec" --pidfile "$dir/dockerd.pid" \
    --iptables=false --bridge="$bridge" --add-runtime "runsc=$gvisor" >"$dir/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do
    "$dockercli" version >/dev/null 2>&1 && break
    sleep 0.2
  done
  "$dockercli" version >/dev/null 2>&1 || { tail -20 "$dir/dockerd.log" >&2; die "dockerd did not come up"; }
fi

empty docker "$dockercli"
empty podman podman

# --- the image: a busybox rootfs, no registry needed -------------------------
# rootfs TARBALL WORKDIR BUSYBOX LOGIN_SHELL [COMMAND...]: a rootfs of one
# static busybox with a link per COMMAND (none given: every command it has;
# listing them runs it, through qemu for another architecture's), packed.
rootfs() {
  local tarball=$1 r=$2 bb=$3 shell=$4
  shift 4
  rm -rf "$r"
  mkdir -p "$r/bin" "$r/tmp" "$r/root" "$r/workspace" "$r/etc" "$r/var/tmp" "$r/run"
  cp "$bb" "$r/bin/busybox"
  [ $# -gt 0 ] || set -- $("$r/bin/busybox" --list)
  for c in "$@"; do
    [ "$c" = busybox ] || ln -sf busybox "$r/bin/$c"
  done
  printf 'root:x:0:0:root:/root:%s\nnobody:x:65534:65534:nobody:/:/bin/false\n' "$shell" >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  chmod 1777 "$r/tmp" "$r/var/tmp"
  tar -C "$r" -cf "$tarball" .
  chmod 0644 "$tarball"
}
tarball="$dir/busybox-rootfs.tar"
if [ ! -s "$tarball" ]; then
  say "building busybox rootfs"
  rootfs "$tarball" "$dir/rootfs" /bin/busybox /bin/sh
fi
"$dockercli" image inspect "$image" >/dev/null 2>&1 || "$dockercli" import "$tarball" "$image" >/dev/null
podman image exists "localhost/$image" || podman import "$tarball" "$image" >/dev/null

# --- an image without a shell: busybox with only a few commands linked ------
# (sleep for the sandbox itself, no sh, tr or grep): what hsbx's kill script
# cannot run in, so its agent stops commands there.
noshell=hsbx-noshell
noshell_tarball="$dir/noshell-rootfs.tar"
if [ ! -s "$noshell_tarball" ]; then
  say "building a shell-less rootfs"
  rootfs "$noshell_tarball" "$dir/rootfs-noshell" /bin/busybox /bin/false sleep echo cat true false
fi
"$dockercli" image inspect "$noshell" >/dev/null 2>&1 || "$dockercli" import "$noshell_tarball" "$noshell" >/dev/null
podman image exists "localhost/$noshell" || podman import "$noshell_tarball" "$noshell" >/dev/null

# --- an arm64 sandbox on this machine: qemu-user through binfmt_misc ---------
# The kernel runs arm64 binaries with qemu-aarch64 once it is registered with
# the F flag (the interpreter is opened now, so it works inside containers).
binfmt=/proc/sys/fs/binfmt_misc
[ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" || die "cannot mount binfmt_misc (needed to run arm64 sandboxes)"
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  say "registering qemu-aarch64 with binfmt_misc"
  grep -v '^#' /usr/lib/binfmt.d/qemu-aarch64.conf >"$binfmt/register"
fi
[ "$(head -1 "$binfmt/qemu-aarch64")" = enabled ] || echo 1 >"$binfmt/qemu-aarch64"
arm_image=hsbx-busybox-arm64
arm_tarball="$dir/busybox-rootfs-arm64.tar"
if [ ! -s "$arm_tarball" ]; then
  say "building an arm64 busybox rootfs from Debian's busybox-static:arm64"
  dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; apt-get update -qq; }
  deb="$dir/debs"
  rm -rf "$deb" && mkdir -p "$deb"
  (cd "$deb" && apt-get download -qq busybox-static:arm64 >/dev/null) || { apt-get update -qq; (cd "$deb" && apt-get download -qq busybox-static:arm64 >/dev/null); }
  dpkg-deb -x "$deb"/busybox-static_*_arm64.deb "$deb/x"
  rootfs "$arm_tarball" "$dir/rootfs-arm64" "$deb/x/bin/busybox" /bin/sh
fi
"$dockercli" image inspect "$arm_image" >/dev/null 2>&1 || "$dockercli" import --platform linux/arm64 "$arm_tarball" "$arm_image" >/dev/null
podman image exists "localhost/$arm_image" || podman import --arch arm64 "$arm_tarball" "$arm_image" >/dev/null

# --- rootless podman: a normal user with subordinate ids ---------------------
id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
grep -q "^$user:" /etc/subuid || echo "$user:200000:65536" >>/etc/subuid
grep -q "^$user:" /etc/subgid || echo "$user:200000:65536" >>/etc/subgid
uid=$(id -u "$user")
rundir="$dir/rootless-run"
mkdir -p "$rundir" && chown "$user:" "$rundir" && chmod 0700 "$rundir"
mkdir -p "$dir/podman/rootless" && chown "$user:" "$dir/podman/rootless" && chmod 0700 "$dir/podman/rootless"
chmod 0755 "$dir"
# A wrapper that runs podman as the rootless user while keeping the caller's
# environment (hsbx passes secret env values through it, never on argv).
wrapper="$dir/bin/podman-rootless"
mkdir -p "$dir/bin"
cat >"$wrapper" <<WRAP
#!/bin/sh
exec setpriv --reuid=$uid --regid=$(id -g "$user") --init-groups \\
  env HOME=/home/$user USER=$user XDG_RUNTIME_DIR=$rundir CONTAINERS_CONF=$conf CONTAINERS_STORAGE_CONF=$storage_rootless \\
  /usr/bin/podman "\$@"
WRAP
chmod 0755 "$wrapper"
# Rootless podman keeps its user namespace alive in a pause process, and its
# database remembers which containers run. When something killed every
# process of the user (a machine's session ending, an OOM kill) while a
# container ran, each podman call fails with "invalid internal status, try
# resetting the pause process". `podman system migrate` marks those containers
# stopped and starts a fresh namespace; nothing of ours is lost (they are dead).
if ! "$wrapper" info >/dev/null 2>&1; then
  say "rootless podman is in a stale state (its processes were killed); resetting it with podman system migrate"
  "$wrapper" system migrate >/dev/null 2>&1 || true
  "$wrapper" info >/dev/null 2>&1 || { "$wrapper" info 2>&1 | tail -5 >&2; die "rootless podman does not answer after podman system migrate"; }
fi
empty "podman (rootless)" "$wrapper"
"$wrapper" image exists "localhost/$image" || "$wrapper" import "$tarball" "$image" >/dev/null
"$wrapper" image exists "localhost/$noshell" || "$wrapper" import "$noshell_tarball" "$noshell" >/dev/null
"$wrapper" image exists "localhost/$arm_image" || "$wrapper" import --arch arm64 "$arm_tarball" "$arm_image" >/dev/null

# Run a command as the rootless user, as that user would (their HOME, their
# podman storage), keeping the rest of the caller's environment.
cat >"$dir/bin/as-rootless" <<WRAP
#!/bin/sh
exec setpriv --reuid=$uid --regid=$(id -g "$user") --init-groups \\
  env HOME=/home/$user USER=$user XDG_RUNTIME_DIR=$rundir CONTAINERS_CONF=$conf CONTAINERS_STORAGE_CONF=$storage_rootless "\$@"
WRAP
chmod 0755 "$dir/bin/as-rootless"

# A "docker" that is really podman (the podman-docker shim), for detection tests.
mkdir -p "$dir/shim"
printf '#!/bin/sh\nexec /usr/bin/podman "$@"\n' >"$dir/shim/docker"
chmod 0755 "$dir/shim/docker"

cat >"$dir/env.sh" <<ENV
# written by scripts/engines.sh — source it to reach the real engines
export DOCKER_HOST=$DOCKER_HOST
export CONTAINERS_CONF=$conf
export CONTAINERS_STORAGE_CONF=$storage
export HSBX_IT_IMAGE=$image
export HSBX_IT_IMAGE_ARM64=$arm_image
export HSBX_IT_IMAGE_NOSHELL=$noshell
export HSBX_IT_DOCKER=$dockercli
export HSBX_IT_PODMAN=/usr/bin/podman
export HSBX_IT_PODMAN_ROOTLESS=$wrapper
export HSBX_IT_DOCKER_SHIM=$dir/shim/docker
export HSBX_IT_AS_ROOTLESS=$dir/bin/as-rootless
export HSBX_IT_ROOTLESS_UID=$uid
export HSBX_IT_ROOTLESS_GID=$(id -g "$user")
export HSBX_IT_GVISOR_DOCKER=runsc
export HSBX_IT_GVISOR_PODMAN=$gvisor
ENV

"$dockercli" run --rm --network none "$image" true || die "docker cannot run a container"
podman run --rm --network none "$image" true || die "podman (rootful) cannot run a container"
"$wrapper" run --rm --network none "$image" true || die "podman (rootless) cannot run a container"
"$dockercli" run --rm --network none --runtime runsc "$image" true || die "docker cannot run a container under gVisor (runsc)"
podman run --rm --network none --runtime "$gvisor" "$image" true || die "podman (rootful) cannot run a container under gVisor ($gvisor)"
"$wrapper" run --rm --network none --runtime "$gvisor" "$image" true || die "podman (rootless) cannot run a container under gVisor ($gvisor)"

# --- docker on "another machine": reached only over ssh ----------------------
HSBX_ENGINES_FRESH=$fresh bash "$here/engines-remote.sh" "$dir" >>"$dir/env.sh" || die "the engine reached over ssh did not come up (engines-remote.sh)"
say "ready: . $dir/env.sh"
