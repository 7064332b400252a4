#!/usr/bin/env bash
# Verifies an `airlock attest` DSSE envelope with OpenSSL (a third-party
# Ed25519 implementation), independently of airlock's own code.
#   usage: scripts/verify-attestation.sh ATTESTATION.json JOURNAL_PUBLIC_KEY_FILE
# The public key file holds `ed25519:HEX` (STATE/journal.pub, or what
# `airlock init` printed). Prints the in-toto statement on success; exits 1
# on a bad signature. Needs openssl (3.x), python3 (JSON/base64 glue only).
set -euo pipefail
att=$1 pub=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$att" "$pub" "$work" <<'PY'
import base64, json, sys
att, pub, work = sys.argv[1:]
env = json.load(open(att))
ptype = env["payloadType"].encode()
body = base64.b64decode(env["payload"])
# DSSE v1 pre-authentication encoding
pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(body), body)
open(f"{work}/pae", "wb").write(pae)
open(f"{work}/sig", "wb").write(base64.b64decode(env["signatures"][0]["sig"]))
open(f"{work}/statement.json", "wb").write(body)
key = bytes.fromhex(open(pub).read().strip().removeprefix("ed25519:"))
der = bytes.fromhex("302a300506032b6570032100") + key   # SubjectPublicKeyInfo for Ed25519
pem = "-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(der).decode() + "\n-----END PUBLIC KEY-----\n"
open(f"{work}/pub.pem", "w").write(pem)
PY
openssl pkeyutl -verify -pubin -inkey "$work/pub.pem" -rawin -in "$work/pae" -sigfile "$work/sig" >&2
cat "$work/statement.json"; echo
