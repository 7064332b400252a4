# Shared by scripts/dockerd-lab.sh and scripts/podman-lab.sh (sourced, not
# run): waiting for a private engine's Docker-compatible socket and taking
# the engine down again. The caller sets `dir`, `sock`, `pidfile` and
# `owner` (a pid, or empty) and passes the engine's name and log file.

# Waits (60 s) until engine NAME (pid PID, log LOG) answers on $sock, then
# prints the socket; with $owner set, a watcher stops the lab once that
# process is gone. Exits 1 with the log's tail if the engine dies or stays
# silent.
lab_wait() {
  local name=$1 pid=$2 log=$3
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited; its log ($log) ends:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    if [[ -S $sock ]] && timeout 5 docker -H "unix://$sock" version --format '{{.Server.Version}}' >/dev/null 2>&1; then
      if [[ -n $owner ]]; then
        setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' \
          _ "$owner" "$(realpath "$0")" "$dir" >/dev/null 2>&1 </dev/null &
      fi
      echo "$sock"
      return
    fi
    sleep 0.2
  done
  echo "$name did not answer on $sock within 60 s; its log ($log) ends:" >&2
  tail -n 20 "$log" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
}

# Stops the engine this lab started (only if its command line names our
# socket), SIGKILLs every process whose command line holds NEEDLE (the
# shims and runsc sandboxes that outlive the engine), unmounts what is left
# under $dir and removes the listed PATHS beneath it, then $dir if empty.
lab_stop() {
  local needle=$1
  shift
  if [[ -f $pidfile ]]; then
    local pid
    pid=$(cat "$pidfile")
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "unix://$sock"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$needle"; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  if [[ -d $dir ]]; then
    awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    local path
    for path in "$@"; do rm -rf "${dir:?}/$path"; done
    rmdir "$dir" 2>/dev/null || true
  fi
}
