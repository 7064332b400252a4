#!/usr/bin/env bash
# A private Podman API service (Docker-compatible socket) for tests: its
# storage, run root, socket, pidfile and log all live under DIR, so a user's
# own Podman storage (/var/lib/containers) is never touched.
#
#   scripts/podman-lab.sh start DIR [PID]  # prints the socket path once it answers;
#                                         # with PID: stopped by itself once PID is gone
#   scripts/podman-lab.sh stop DIR        # stops that service and removes DIR's state
#
# The OCI runtime is gVisor's runsc (ptrace platform, no network): Debian
# 12's Podman with its runc/crun cannot start containers on hosts where it
# fails to apply rlimits, and airlock's containers never use a network.
# airlock names the runtime itself (`[sandbox.docker] runtime = "runsc"`),
# so the cgroup bounds leave room for gVisor's Sentry.
set -euo pipefail

usage() { echo "usage: $0 start DIR [PID] | stop DIR" >&2; exit 2; }
[[ $# -eq 2 || ( $# -eq 3 && $1 == start && $3 =~ ^[0-9]+$ ) ]] || usage
cmd=$1
dir=$(realpath -m "$2")
owner=${3:-}
sock="$dir/podman.sock"
pidfile="$dir/podman.pid"

podman_args() {
  printf '%s\n' --root "$dir/storage" --runroot "$dir/run" --tmpdir "$dir/tmp" \
    --runtime runsc --runtime-flag platform=ptrace --runtime-flag network=none \
    --cgroup-manager cgroupfs --events-backend file
}

start() {
  command -v podman >/dev/null || { echo "podman not found: apt-get install podman" >&2; exit 1; }
  command -v runsc >/dev/null || { echo "runsc not found: apt-get install runsc" >&2; exit 1; }
  command -v docker >/dev/null || { echo "docker (the client) not found: apt-get install docker.io" >&2; exit 1; }
  if [[ -S $sock ]] && [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$sock"; return
  fi
  mkdir -p "$dir/storage" "$dir/run" "$dir/tmp"
  chmod 0700 "$dir"
  mapfile -t args < <(podman_args)
  nohup podman "${args[@]}" system service --time=0 "unix://$sock" >"$dir/podman.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$pidfile"
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "podman system service exited; its log ($dir/podman.log) ends:" >&2
      tail -n 20 "$dir/podman.log" >&2
      exit 1
    fi
    if [[ -S $sock ]] && timeout 5 docker -H "unix://$sock" version --format "{{.Server.Version}}" >/dev/null 2>&1; then
      if [[ -n $owner ]]; then
        # A watcher that stops this service once its owner (a test process) is gone.
        setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' \
          _ "$owner" "$(realpath "$0")" "$dir" >/dev/null 2>&1 </dev/null &
      fi
      echo "$sock"; return
    fi
    sleep 0.2
  done
  echo "podman did not answer on $sock within 60 s; its log ($dir/podman.log) ends:" >&2
  tail -n 20 "$dir/podman.log" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
}

stop() {
  if [[ -f $pidfile ]]; then
    local pid
    pid=$(cat "$pidfile")
    # Only the service this script started: its command line names our socket.
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "unix://$sock"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # conmon and runsc processes of this service outlive it: end those whose
  # command line names DIR, by pid.
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$dir/"; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  if [[ -d $dir ]]; then
    awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$dir/storage" "$dir/run" "$dir/tmp" "$dir/podman.sock" "$dir/podman.pid" "$dir/podman.log"
    rmdir "$dir" 2>/dev/null || true
  fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
