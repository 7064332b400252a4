#!/usr/bin/env bash
# Builds airlock's base worker image offline, from this host's own Debian
# packages: dash, coreutils, libc6 and python3-minimal (with its interpreter
# and standard library), the shared libraries they load, a minimal
# /etc (passwd/group with root and nobody/nogroup 65534) and nothing else.
# It is `docker import`ed under TAG; no registry is contacted.
#
#   scripts/docker-image.sh SOCKET TAG     # e.g. /tmp/lab/docker.sock airlock-base:1
#
# Idempotent: the image carries a label with the digest of its file list
# and package versions; an image of TAG with the same label is kept as is.
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 SOCKET TAG" >&2; exit 2; }
sock=$1
tag=$2
docker=(docker -H "unix://$sock")
"${docker[@]}" version >/dev/null || { echo "no Docker daemon answers at $sock" >&2; exit 1; }

python=$(readlink -f /usr/bin/python3)
pkgs=(dash coreutils libc6 python3-minimal)
pkgs+=("$(dpkg -S "$python" | cut -d: -f1)")
pyver=$(basename "$python")                     # python3.11
pkgs+=("$(dpkg -S "/usr/lib/$pyver/os.py" | cut -d: -f1 | cut -d, -f1)")
# The rest of the standard library (json, csv, …) where it is installed.
dpkg -s "lib$pyver-stdlib" >/dev/null 2>&1 && pkgs+=("lib$pyver-stdlib")

# Every file the packages ship, with symlinked directories on the path
# resolved (/lib64/x -> /usr/lib64/x on a merged-/usr host), plus the
# shared-library closure of every ELF file among them.
list=$(mktemp)
root=$(mktemp -d)
trap 'rm -rf "$list" "$root"' EXIT
dpkg -L "${pkgs[@]}" | python3 -c '
import os, subprocess, sys
seen = set()
def add(p):
    p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
    if p in seen or not os.path.lexists(p):
        return
    seen.add(p)
    if os.path.islink(p):
        t = os.readlink(p)
        add(t if t.startswith("/") else os.path.join(os.path.dirname(p), t))
for line in sys.stdin:
    p = line.rstrip("\n")
    if p.startswith("/") and not p.startswith(("/usr/share/doc", "/usr/share/man", "/usr/share/lintian", "/usr/share/info")):
        if not os.path.isdir(p) or os.path.islink(p):
            add(p)
elf = [p for p in sorted(seen) if os.path.isfile(p) and not os.path.islink(p) and open(p, "rb").read(4) == b"\x7fELF"]
for p in elf:
    out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
    for l in out.splitlines():
        parts = l.split()
        for w in parts:
            if w.startswith("/"):
                add(w)
                add(os.path.realpath(w))
                break
print("\n".join(sorted(p.lstrip("/") for p in seen)))
' >"$list"

digest=$( { cat "$list"; dpkg-query -W "${pkgs[@]}"; } | sha256sum | cut -c1-16)
if [[ "$("${docker[@]}" image inspect -f '{{index .Config.Labels "airlock.rootfs"}}' "$tag" 2>/dev/null)" == "$digest" ]]; then
  echo "$tag (up to date, rootfs $digest)"
  exit 0
fi

tar -C / --no-recursion -cf - -T "$list" | tar -C "$root" -xf -
for d in bin sbin lib lib64; do
  [[ -L /$d ]] && ln -s "$(readlink "/$d")" "$root/$d"
done
mkdir -p "$root/etc" "$root/tmp" "$root/workspace"
chmod 1777 "$root/tmp"
ln -sf dash "$root/usr/bin/sh"
cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
P
cat >"$root/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
G
cp /etc/ld.so.conf "$root/etc/" 2>/dev/null || echo 'include /etc/ld.so.conf.d/*.conf' >"$root/etc/ld.so.conf"
ldconfig -r "$root"

tar -C "$root" --numeric-owner -cf - . |
  "${docker[@]}" import \
    --change "LABEL airlock.rootfs=$digest" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'USER 65534:65534' \
    --change 'WORKDIR /workspace' \
    - "$tag" >/dev/null
echo "$tag (built, rootfs $digest, $(du -sh "$root" | cut -f1))"
