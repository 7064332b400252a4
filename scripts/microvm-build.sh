#!/bin/sh
# Builds the microVM tier's guest: a Debian cloud kernel and an initramfs
# holding airlock's guest init (the airlock binary, stripped, with its
# shared libraries), the virtio modules it loads, and a small read-only tool
# image (sh, coreutils, python3 without its tests and tools).
#
#   scripts/microvm-build.sh [AIRLOCK_BINARY] [OUT_DIR]
#
# AIRLOCK_BINARY defaults to target/debug/airlock, OUT_DIR to
# ${AIRLOCK_MICROVM_DIR:-$HOME/.cache/airlock/microvm}. Writes OUT_DIR/vmlinuz
# (the bzImage, for QEMU), OUT_DIR/vmlinux (the same kernel uncompressed to
# ELF, for Firecracker), OUT_DIR/initramfs.cpio (uncompressed newc: it unpacks fastest under TCG)
# and OUT_DIR/fingerprint (the binary's build ID, which the guest reports
# and the host must share). Needs apt-get (download only: nothing is
# installed on the host), dpkg-deb, cpio, strip, ldd, python3 and the
# decompressor of the kernel (zstd for Debian's). Point [sandbox.microvm]
# kernel (vmlinuz, or vmlinux with vmm = "firecracker") and initramfs at them.
set -eu

bin=${1:-target/debug/airlock}
out=${2:-${AIRLOCK_MICROVM_DIR:-$HOME/.cache/airlock/microvm}}
[ -x "$bin" ] || { echo "no airlock binary at $bin (cargo build -p airlock-cli first)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The kernel: the versioned package the metapackage depends on.
kpkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$kpkg" ] || { echo "cannot resolve linux-image-cloud-amd64 (apt-get update?)" >&2; exit 1; }
kver=${kpkg#linux-image-}
if [ ! -f "$out/kernel-$kver/boot/vmlinuz-$kver" ]; then
    (cd "$work" && apt-get download "$kpkg" >/dev/null 2>&1) || { echo "apt-get download $kpkg failed" >&2; exit 1; }
    rm -rf "$out/kernel-$kver"
    dpkg-deb -x "$work"/"$kpkg"_*.deb "$out/kernel-$kver"
    rm -f "$work"/*.deb
fi
cp "$out/kernel-$kver/boot/vmlinuz-$kver" "$out/vmlinuz"

# Firecracker loads only an ELF kernel: the bzImage's payload, decompressed
# the way the kernel's scripts/extract-vmlinux does it (find each
# compressor's magic, try to decompress from there, keep the first ELF).
extract_vmlinux() { # $1 bzImage, $2 the ELF vmlinux to write
    for try in '\037\213\010 gzip -dc' '\375\067\172\130\132\000 xz -dc' '\050\265\057\375 zstd -dcq' \
        '\002\041\114\030 lz4 -dcq' '\135\000\000 xz -dc --format=lzma'; do
        magic=${try%% *}
        cmd=${try#* }
        command -v "${cmd%% *}" >/dev/null || continue
        for pos in $(python3 -c 'import sys
d = open(sys.argv[1], "rb").read()
m = sys.argv[2].encode("latin1").decode("unicode_escape").encode("latin1")
i = d.find(m)
while i >= 0:
    print(i)
    i = d.find(m, i + 1)' "$1" "$magic" | head -n 8); do
            tail -c +$((pos + 1)) "$1" | $cmd >"$2.tmp" 2>/dev/null || true
            if [ "$(head -c 4 "$2.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
                mv "$2.tmp" "$2"
                return 0
            fi
        done
    done
    rm -f "$2.tmp"
    return 1
}
if [ ! -f "$out/kernel-$kver/vmlinux" ]; then
    extract_vmlinux "$out/vmlinuz" "$out/kernel-$kver/vmlinux" ||
        { echo "cannot extract an ELF vmlinux from $out/vmlinuz (is its decompressor installed?)" >&2; exit 1; }
fi
cp "$out/kernel-$kver/vmlinux" "$out/vmlinux"

# 2. The root: airlock, its libraries, the modules, the tool image.
root=$work/root
mkdir -p "$root/airlock/modules" "$root/proc" "$root/dev" "$root/tmp" "$root/etc" "$root/usr/bin" "$root/usr/lib"
ln -s usr/bin "$root/bin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
strip -o "$root/airlock/airlock" "$bin"
# virtio_console and virtio_mmio are modules in Debian's cloud kernel; the
# guest init loads them (virtio and virtio_ring first, as needed). The
# vsock modules are Firecracker's transport.
for m in virtio_ring virtio virtio_mmio virtio_console vsock vmw_vsock_virtio_transport_common \
    vmw_vsock_virtio_transport; do
    f=$(find "$out/kernel-$kver/lib/modules" -name "$m.ko" | head -n1)
    [ -n "$f" ] && cp "$f" "$root/airlock/modules/"
done

copy() { # copy a host file (following links) into the root at the same path
    mkdir -p "$root$(dirname "$1")"
    cp -L "$1" "$root$1"
}
libs() { # the shared libraries of each binary
    for b in "$@"; do ldd "$b" 2>/dev/null | awk '/=>/ {print $3} /^\t\// {print $1}'; done | sort -u
}
tools="sh dash cat head tail ls sleep echo true false env wc cp mv rm mkdir touch sort tr cut printf id test stat dd tee python3"
paths=""
# The system's own programs (not a user's pyenv or ~/bin).
PATH=/usr/bin:/bin:/usr/sbin:/sbin
for t in $tools; do
    p=""
    for d in /usr/bin /bin; do [ -x "$d/$t" ] && { p=$d/$t; break; }; done
    [ -n "$p" ] || { echo "no $t in /usr/bin or /bin" >&2; exit 1; }
    paths="$paths $(readlink -f "$p")"
    cp -L "$p" "$root/usr/bin/$t"
done
for l in $(libs "$bin" $paths); do
    case "$l" in /lib/*|/lib64/*) l=/usr$l ;; esac
    [ -e "$l" ] && copy "$l"
done
# python3's standard library, without tests, tools and GUI, compiled only.
py=$(/usr/bin/python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
mkdir -p "$root/usr/lib/$py"
(cd "/usr/lib/$py" && find . \( -name test -o -name tests -o -name idlelib -o -name tkinter -o -name turtledemo \
    -o -name ensurepip -o -name lib2to3 -o -name pydoc_data -o -name distutils -o -name site-packages \
    -o -name dist-packages -o -name 'config-3*' \) -prune -o \( -type f ! -name '*.opt-1.pyc' ! -name '*.opt-2.pyc' \
    -print \) | cpio -pdm --quiet "$root/usr/lib/$py")
for l in $(libs "/usr/lib/$py"/lib-dynload/*.so); do
    case "$l" in /lib/*|/lib64/*) l=/usr$l ;; esac
    [ -e "$l" ] && copy "$l"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
build_id=$(readelf -n "$root/airlock/airlock" | awk '/Build ID/ {print $3}')
echo "$build_id" >"$root/airlock/fingerprint"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$out/initramfs.cpio.tmp"
mv "$out/initramfs.cpio.tmp" "$out/initramfs.cpio"
echo "$build_id" >"$out/fingerprint"
echo "kernel    $out/vmlinuz ($kver); for Firecracker $out/vmlinux"
echo "initramfs $out/initramfs.cpio ($(du -m "$out/initramfs.cpio" | cut -f1) MiB)"
echo "guest fingerprint $build_id"
