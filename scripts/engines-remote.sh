#!/usr/bin/env bash
# engines-remote.sh — a docker engine this machine reaches only over ssh, as
# an engine on another machine would be: a dockerd in a mount namespace of
# its own (an empty /tmp, /root and /home: no host path hsbx passes exists
# there), its socket writable by one user only (hsbxremote), reached through
# an sshd on 127.0.0.1 that lets that user in by key. Called by engines.sh,
# which installs openssh-server; idempotent.
#
# Both run gVisor too: engines.sh's runsc wrapper, copied where their
# namespaces see it (docker: the runtime "runsc"; podman's remote client
# cannot choose a runtime, so hsbx refuses oci_runtime there).
#
# Usage (as root):  scripts/engines-remote.sh DIR          (start; prints env lines)
#                   scripts/engines-remote.sh --stop DIR   (stop dockerd and sshd)
# Afterwards:       HSBX_IT_DOCKER_SSH (the DOCKER_HOST), HSBX_IT_SSH_PATH
#                   (a directory to put first on PATH: an ssh that uses this
#                   script's key and known host) in DIR/env.sh
set -euo pipefail

runDir() { printf '/run/hsbx-remote/%s' "$(printf '%s' "$1" | sha256sum | cut -c1-8)"; }
stop() {
  local d=$1 pid
  for f in "$(runDir "$d")/dockerd.pid" "$(runDir "$d")/podman.pid" "$d/remote/sshd.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  done
}
if [ "${1:-}" = --stop ]; then
  stop "${2:?usage: engines-remote.sh --stop DIR}"
  exit 0
fi
dir=${1:?usage: engines-remote.sh DIR}
# The engine's socket and data outside /tmp, /root and /home (which its
# namespace replaces), one set per DIR.
run=$(runDir "$dir")
id=$(basename "$run")
say() { printf 'engines (remote): %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

user=hsbxremote
port=22222
image=hsbx-busybox
r="$dir/remote"
mkdir -p "$r" "$run"
chmod 0755 /run/hsbx-remote "$run"

# --- the user, and the group that may use the engine's socket ---------------
getent group "$user" >/dev/null || groupadd "$user"
id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash -g "$user" "$user"
usermod -p '*' "$user" # no password, yet not locked: sshd (without PAM) refuses a locked account a key login

# --- the engine: dockerd in its own mount namespace ---------------------------
# Its data under /var/lib (visible here, as a remote engine's disk is to
# nobody; it is not a path hsbx passes), its socket and pid file under /run
# (what the namespace keeps shared with this machine).
data=/var/lib/hsbx-remote-docker/$id
sock="$run/docker.sock"
direct="unix://$sock"
# gVisor for both engines: engines.sh's wrapper, where the namespaces see it.
gv=/var/lib/hsbx-remote-gvisor/$id/runsc
install -D -m 0755 "$dir/gvisor/runsc" "$gv.new" && mv -f "$gv.new" "$gv"
if DOCKER_HOST=$direct docker version >/dev/null 2>&1 &&
  ! DOCKER_HOST=$direct docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
  say "restarting the remote dockerd: it runs without the runtime runsc"
  pid=$(cat "$run/dockerd.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
fi
if ! DOCKER_HOST=$direct docker version >/dev/null 2>&1; then
  say "starting dockerd in a mount namespace of its own on $sock"
  mkdir -p "$data"
  rm -f "$sock"
  nohup setsid unshare -m --propagation private sh -c '
    mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs tmpfs /root && mount -t tmpfs tmpfs /home &&
    exec dockerd --host "unix://$0" --data-root "$1" --exec-root "$2" --pidfile "$3" \
      --group "$4" --iptables=false --bridge=none --add-runtime "runsc=$5"' \
    "$sock" "$data" "$run/exec" "$run/dockerd.pid" "$user" "$gv" >"$r/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do
    DOCKER_HOST=$direct docker version >/dev/null 2>&1 && break
    sleep 0.2
  done
  DOCKER_HOST=$direct docker version >/dev/null 2>&1 || { tail -20 "$r/dockerd.log" >&2; die "the remote dockerd did not come up"; }
fi
# --fresh (engines.sh's, passed as HSBX_ENGINES_FRESH=1): empty it first,
# as engines.sh empties its local engines.
if [ "${HSBX_ENGINES_FRESH:-}" = 1 ]; then
  say "emptying the remote dockerd (--fresh)"
  DOCKER_HOST=$direct docker ps -aq | xargs -r env DOCKER_HOST="$direct" docker rm -f >/dev/null
  DOCKER_HOST=$direct docker volume ls -q | xargs -r env DOCKER_HOST="$direct" docker volume rm -f >/dev/null
  DOCKER_HOST=$direct docker image ls -q | sort -u | xargs -r env DOCKER_HOST="$direct" docker rmi -f >/dev/null 2>&1 || true
fi
DOCKER_HOST=$direct docker image inspect "$image" >/dev/null 2>&1 ||
  DOCKER_HOST=$direct docker import "$dir/busybox-rootfs.tar" "$image" >/dev/null

# --- ssh: a key for root, the user's authorized key and environment ----------
ssh="$r/ssh"
mkdir -p "$ssh/bin"
chmod 0700 "$ssh"
[ -f "$ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C hsbx-ci -f "$ssh/id_ed25519"
[ -f "$ssh/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C hsbx-ci-host -f "$ssh/host_ed25519"
home=$(getent passwd "$user" | cut -d: -f6)
install -d -m 0700 -o "$user" -g "$user" "$home/.ssh"
install -m 0600 -o "$user" -g "$user" "$ssh/id_ed25519.pub" "$home/.ssh/authorized_keys"
# What the far side's `docker system dial-stdio` reaches.
printf 'DOCKER_HOST=%s\n' "$direct" >"$home/.ssh/environment"
chown "$user:$user" "$home/.ssh/environment"
chmod 0600 "$home/.ssh/environment"
printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$ssh/host_ed25519.pub")" >"$ssh/known_hosts"
cat >"$ssh/config" <<CONF
# written by scripts/engines-remote.sh: the client side of the test engine
Host *
  IdentityFile $ssh/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
CONF
cat >"$ssh/sshd_config" <<CONF
# written by scripts/engines-remote.sh: the engine's machine's sshd
ListenAddress 127.0.0.1
Port $port
HostKey $ssh/host_ed25519
PidFile $r/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
AllowUsers $user
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitUserEnvironment yes
UsePAM no
MaxStartups 100:30:200
MaxSessions 100
CONF
cat >"$ssh/bin/ssh" <<WRAP
#!/bin/sh
exec /usr/bin/ssh -F $ssh/config "\$@"
WRAP
chmod 0755 "$ssh/bin/ssh"
mkdir -p /run/sshd
if ! [ -f "$r/sshd.pid" ] || ! kill -0 "$(cat "$r/sshd.pid")" 2>/dev/null; then
  say "starting sshd on 127.0.0.1:$port"
  /usr/sbin/sshd -f "$ssh/sshd_config" -E "$r/sshd.log"
fi

remote="ssh://$user@127.0.0.1:$port"
for _ in $(seq 1 50); do
  PATH="$ssh/bin:$PATH" DOCKER_HOST=$remote docker version >/dev/null 2>&1 && break
  sleep 0.2
done
PATH="$ssh/bin:$PATH" DOCKER_HOST=$remote docker run --rm --network none "$image" true ||
  die "docker over ssh ($remote) cannot run a container"
# The premise: a host path does not exist there.
probe=$(mktemp -d /tmp/hsbx-remote-probe.XXXXXX)
touch "$probe/here"
if PATH="$ssh/bin:$PATH" DOCKER_HOST=$remote docker run --rm --network none -v "$probe:/p:ro" "$image" test -e /p/here 2>/dev/null; then
  rm -rf "$probe"
  die "the remote engine sees this machine's $probe: it is not in a mount namespace of its own"
fi
rm -rf "$probe"

# --- podman's service in a namespace of the same kind, over the same sshd ---
# The podman client speaks ssh itself (Go's, not the ssh binary): the key in
# CONTAINER_SSHKEY, the host key from $HOME/.ssh/known_hosts of the caller
# (the tests write it; HSBX_IT_SSH_KNOWN_HOSTS is the line).
psock="$run/podman.sock"
pdirect="unix://$psock"
if ! CONTAINER_HOST=$pdirect podman --remote version >/dev/null 2>&1; then
  say "starting podman's service in a mount namespace of its own on $psock"
  pdata=/var/lib/hsbx-remote-podman/$id
  mkdir -p "$pdata"
  cp "$dir/containers.conf" "$run/containers.conf"
  printf '[storage]\ndriver = "overlay"\ngraphroot = "%s/root"\nrunroot = "%s/podman-run"\n' "$pdata" "$run" >"$run/storage.conf"
  rm -f "$psock"
  nohup setsid unshare -m --propagation private sh -c '
    mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs tmpfs /root && mount -t tmpfs tmpfs /home &&
    exec env CONTAINERS_CONF="$1" CONTAINERS_STORAGE_CONF="$2" podman system service --time=0 "unix://$0"' \
    "$psock" "$run/containers.conf" "$run/storage.conf" >"$r/podman.log" 2>&1 </dev/null &
  echo $! >"$run/podman.pid"
  for _ in $(seq 1 100); do
    [ -S "$psock" ] && CONTAINER_HOST=$pdirect podman --remote version >/dev/null 2>&1 && break
    sleep 0.2
  done
  CONTAINER_HOST=$pdirect podman --remote version >/dev/null 2>&1 || { tail -20 "$r/podman.log" >&2; die "the remote podman service did not come up"; }
fi
chgrp "$user" "$psock" && chmod 0660 "$psock"
if [ "${HSBX_ENGINES_FRESH:-}" = 1 ]; then
  say "emptying the remote podman (--fresh)"
  CONTAINER_HOST=$pdirect podman --remote pod rm -af >/dev/null 2>&1 || true
  CONTAINER_HOST=$pdirect podman --remote rm -af -t 0 >/dev/null
  CONTAINER_HOST=$pdirect podman --remote volume rm -af >/dev/null
  CONTAINER_HOST=$pdirect podman --remote image rm -af >/dev/null 2>&1 || true
fi
CONTAINER_HOST=$pdirect podman --remote image exists "localhost/$image" ||
  CONTAINER_HOST=$pdirect podman --remote import "$dir/busybox-rootfs.tar" "$image" >/dev/null
premote="ssh://$user@127.0.0.1:$port$psock"
known="[127.0.0.1]:$port $(cut -d' ' -f1,2 "$ssh/host_ed25519.pub")"
phome=$(mktemp -d /tmp/hsbx-remote-home.XXXXXX)
mkdir -p "$phome/.ssh" && printf '%s\n' "$known" >"$phome/.ssh/known_hosts"
if ! HOME=$phome CONTAINER_HOST=$premote CONTAINER_SSHKEY="$ssh/id_ed25519" podman run --rm --network none "$image" true; then
  rm -rf "$phome"
  die "podman over ssh ($premote) cannot run a container"
fi
# The premise again (podman refuses a bind of a path it does not have).
probe=$(mktemp -d /tmp/hsbx-remote-probe.XXXXXX)
touch "$probe/here"
if HOME=$phome CONTAINER_HOST=$premote CONTAINER_SSHKEY="$ssh/id_ed25519" podman run --rm --network none -v "$probe:/p:ro" "$image" test -e /p/here 2>/dev/null; then
  rm -rf "$probe" "$phome"
  die "the remote podman sees this machine's $probe: it is not in a mount namespace of its own"
fi
rm -rf "$probe" "$phome"

printf 'export HSBX_IT_DOCKER_SSH=%s\nexport HSBX_IT_SSH_PATH=%s\n' "$remote" "$ssh/bin"
printf 'export HSBX_IT_GVISOR_DOCKER_SSH=runsc\nexport HSBX_IT_GVISOR_PODMAN_SSH=%s\n' "$gv"
printf "export HSBX_IT_PODMAN_SSH=%s\nexport HSBX_IT_SSH_KEY=%s\nexport HSBX_IT_SSH_KNOWN_HOSTS='%s'\n" "$premote" "$ssh/id_ed25519" "$known"
say "ready: docker at $remote (PATH=$ssh/bin:\$PATH), podman at $premote"
