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
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "dockerd exited; its log ($dir/dockerd.log) ends:" >&2
      tail -n 20 "$dir/dockerd.log" >&2
      exit 1
    fi
    if [[ -S $sock ]] && timeout 5 docker -H "unix://$sock" version --format '{{.Server.Version}}' >/dev/null 2>&1; then
      if [[ -n $owner ]]; then
        # A watcher that stops this daemon once its owner (a test process) is gone.
        setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' \
          _ "$owner" "$(realpath "$0")" "$dir" >/dev/null 2>&1 </dev/null &
      fi
      echo "$sock"; return
    fi
    sleep 0.2
  done
  echo "dockerd did not answer on $sock within 60 s; its log ($dir/dockerd.log) ends:" >&2
  tail -n 20 "$dir/dockerd.log" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
}

stop() {
  if [[ -f $pidfile ]]; then
    local pid
    pid=$(cat "$pidfile")
    # Only the daemon this script started: its command line names our socket.
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "unix://$sock"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Container shims (and runsc sandboxes) of this daemon outlive it: end
  # those whose command line names this daemon's exec root, by pid.
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$dir/exec/"; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  # Mounts left under the data or exec root (overlay layers, shm, netns).
  if [[ -d $dir ]]; then
    awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$dir/data" "$dir/exec" "$dir/docker.sock" "$dir/dockerd.pid" "$dir/daemon.json" "$dir/dockerd.log"
    rmdir "$dir" 2>/dev/null || true
  fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
