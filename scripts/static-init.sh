#!/bin/sh
# Builds `airlock-sandbox-init` as a static musl program and installs it in
# DIR, beside the `airlock` there (default: target/release).
#
#   scripts/static-init.sh [DIR]
#
# A native call (or a warm sandbox) execs the init once. A glibc program
# spends its start in the dynamic loader and in glibc's CPU and cache
# set-up, which runs `cpuid` dozens of times; in a virtual machine each
# `cpuid` exits to the hypervisor (6.5-7.4 us apiece on the 2-core guest the
# README's readings come from, where a one-shot `airlock run` got 0.8 ms
# faster with this init). The init links only the `airlock-sandbox` crate
# (no C code), so the target needs no C compiler. Its build fingerprint
# comes from the sources, not the target: it pairs with any `airlock` built
# from the same sources (else calls are refused with `helper.mismatch`).
# Needs rustup (it adds the x86_64-unknown-linux-musl target).
set -eu

cd "$(dirname "$0")/.."
dir=${1:-target/release}
target=x86_64-unknown-linux-musl
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
cargo build --release --locked --quiet --target "$target" -p airlock-sandbox --bin airlock-sandbox-init
mkdir -p "$dir"
# Replaced by rename, so a running call keeps the program it started.
cp "target/$target/release/airlock-sandbox-init" "$dir/.airlock-sandbox-init.new"
mv -f "$dir/.airlock-sandbox-init.new" "$dir/airlock-sandbox-init"
echo "$dir/airlock-sandbox-init (static, $target)"
