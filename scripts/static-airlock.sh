#!/bin/sh
# Builds `airlock` and the programs it starts from beside itself
# (`airlock-broker`, `airlock-fs`, `airlock-git-driver`) as static-pie glibc
# programs and installs them in DIR (default: target/release).
#
#   scripts/static-airlock.sh [DIR]
#
# Why: a one-shot call starts `airlock` once (and a Git query its driver, an
# isolated call its broker). Dynamically linked, the 45 MB `airlock` spends
# its start in the dynamic loader: mapping libc, libm and libgcc_s, looking
# up and binding every symbol it imports, and each fork of it copies those
# mappings. Static-pie, the same sources start 0.3-0.6 ms sooner here
# (`airlock --version`, alternated) and an `airlock run` takes 4-11 % less
# (the bench's "airlock run: this build vs AIRLOCK_BENCH_OTHER"; DESIGN.md).
# Address space layout randomization is kept: the programs are still
# position-independent and relocate themselves at start.
#
# What it costs: the host's glibc is no longer the one that runs. Name
# service lookups (a NATS URL's host name) use the `files` and `dns`
# sources built into glibc (2.34 and later); other NSS modules named in
# /etc/nsswitch.conf (mdns, resolve, ldap) cannot be loaded. The build
# fingerprint is the sources', so these programs pair with an `airlock` or
# init of the same sources built either way (else `helper.mismatch`).
# Needs the glibc static libraries (`libc6-dev`); the C code some crates
# carry (ring, psm) is compiled as for any build.
set -eu

cd "$(dirname "$0")/.."
dir=${1:-target/release}
host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  *-linux-gnu) ;;
  *) echo "static-airlock.sh: the host is $host; a static-pie glibc build needs a *-linux-gnu host" >&2; exit 1 ;;
esac
# An explicit --target keeps the flag off build scripts and proc macros,
# which are built for the host as usual (and shared with a plain build).
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --quiet --target "$host" \
  -p airlock-cli --bin airlock --bin airlock-broker --bin airlock-fs \
  -p airlock-git --bin airlock-git-driver
mkdir -p "$dir"
for program in airlock airlock-broker airlock-fs airlock-git-driver; do
  # Replaced by rename, so a running call keeps the program it started.
  cp "target/$host/release/$program" "$dir/.$program.new"
  mv -f "$dir/.$program.new" "$dir/$program"
  echo "$dir/$program (static-pie, $host)"
done
