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
# shellcheck source=scripts/lab-lib.sh
source "$(dirname "$(realpath "$0")")/lab-lib.sh"

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
  lab_wait "podman system service" "$pid" "$dir/podman.log"
}

stop() {
  # conmon and runsc processes of this service outlive it (their command
  # lines name DIR).
  lab_stop "$dir/" storage run tmp podman.sock podman.pid podman.log
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
