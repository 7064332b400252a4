#!/usr/bin/env bash
# A private Docker daemon for tests: everything it owns (data, exec state,
# socket, pidfile, log) lives under DIR, so a user's own dockerd (default
# socket /var/run/docker.sock, data root /var/lib/docker) is never touched.
#
#   scripts/dockerd-lab.sh start DIR [PID]  # prints the socket path once it answers;
#                                          # with PID: stopped by itself once PID is gone
#   scripts/dockerd-lab.sh stop DIR         # stops that daemon and removes DIR's state
#
# No network set-up: no bridge, no iptables, no masquerading (airlock's
# containers run with NetworkMode=none). The `runsc` runtime (gVisor,
# ptrace platform) is registered when /usr/bin/runsc exists.
set -euo pipefail
# shellcheck source=scripts/lab-lib.sh
source "$(dirname "$(realpath "$0")")/lab-lib.sh"

usage() { echo "usage: $0 start DIR [PID] | stop DIR" >&2; exit 2; }
[[ $# -eq 2 || ( $# -eq 3 && $1 == start && $3 =~ ^[0-9]+$ ) ]] || usage
cmd=$1
dir=$(realpath -m "$2")
owner=${3:-}
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"

# Data root on the same file system as DIR: overlay2 where the kernel and
# that file system support it, vfs otherwise.
storage_driver() {
  if grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null; then
    case "$(stat -f -c %T "$dir")" in
      ext2/ext3|xfs|btrfs|tmpfs) echo overlay2; return ;;
    esac
  fi
  echo vfs
}

start() {
  command -v dockerd >/dev/null && command -v docker >/dev/null ||
    { echo "dockerd or docker not found: apt-get install docker.io" >&2; exit 1; }
  if [[ -S $sock ]] && [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$sock"; return
  fi
  mkdir -p "$dir/data" "$dir/exec"
  chmod 0700 "$dir"
  local runtimes='{}'
  if [[ -x /usr/bin/runsc ]]; then
    runtimes='{"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}}'
  fi
  cat >"$dir/daemon.json" <<JSON
{
  "storage-driver": "$(storage_driver)",
  "runtimes": $runtimes,
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "log-driver": "json-file",
  "features": {"buildkit": false}
}
JSON
  # Its own containerd (managed by dockerd under exec root) and no
  # discovery of a system one: --containerd is not given, and the default
  # containerd socket is only used if it exists, so point the managed one
  # at our exec root.
  nohup dockerd \
    --config-file "$dir/daemon.json" \
    --data-root "$dir/data" \
    --exec-root "$dir/exec" \
    -H "unix://$sock" \
    --pidfile "$pidfile" \
    --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false \
    --bridge=none \
    --userland-proxy=false \
    --containerd-namespace "airlock-lab" \
    --containerd-plugins-namespace "airlock-lab-plugins" \
    >"$dir/dockerd.log" 2>&1 </dev/null &
  local pid=$!
  lab_wait "dockerd" "$pid" "$dir/dockerd.log"
}

stop() {
  # Container shims (and runsc sandboxes) of this daemon outlive it (their
  # command lines name its exec root); mounts are left under the data root.
  lab_stop "$dir/exec/" data exec docker.sock dockerd.pid daemon.json dockerd.log
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
