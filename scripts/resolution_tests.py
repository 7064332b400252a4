#!/usr/bin/env python3
"""Runs the tests that resolve host paths again, with AIRLOCK_RESOLVER=emulated.

Reads `cargo test --workspace --no-run --message-format=json` on stdin and
runs the test executables already built by the first pass (selecting a
subset of packages with `-p` would resolve features differently and build
everything again): every test of the crates that resolve paths, and the
modules of the CLI suite that do. Exits non-zero if any run fails.
"""
import json
import os
import subprocess
import sys

WHOLE = {"airlock-hostfs", "airlock-source", "airlock-broker", "airlock-git"}
CLI_MODULES = [
    "attacks::", "race::", "resolvers::", "prepare::", "run::", "source::", "isolated::", "git::",
    "control_plane::", "git_control::", "approval::", "staging_pool::", "concurrency::", "crash::",
    "publish_race::", "journal::", "data_frames::", "copy_path::", "broker_window::",
]

def main():
    runs = []
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        exe = msg.get("executable")
        if msg.get("reason") != "compiler-artifact" or not exe or not msg.get("profile", {}).get("test"):
            continue
        package = msg["package_id"]
        name = msg["target"]["name"]
        cwd = os.path.dirname(msg["manifest_path"])
        if any(f"/{p}#" in package or package.startswith(f"{p} ") or f"#{p}@" in package for p in WHOLE):
            runs.append((cwd, exe, []))
        elif ("airlock-cli" in package) and name == "cli":
            runs.append((cwd, exe, CLI_MODULES))
    if not runs:
        print("no resolution test executables found", file=sys.stderr)
        return 1
    env = dict(os.environ, AIRLOCK_RESOLVER="emulated")
    failed = 0
    for cwd, exe, filters in runs:
        print(f"     Running {exe} (AIRLOCK_RESOLVER=emulated)", flush=True)
        failed |= subprocess.run([exe, *filters], cwd=cwd, env=env).returncode != 0
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
