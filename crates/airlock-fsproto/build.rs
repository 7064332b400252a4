//! Computes the helpers' build fingerprint, `AIRLOCK_BUILD_FINGERPRINT`:
//! the first 32 hex digits of SHA-256 over the crate version, the optional
//! `AIRLOCK_BUILD_ID` (a packager's release or commit id) and every source
//! file of the crates a helper is built from — this protocol, the broker,
//! the `airlock-fs` client, the rooted file operations, the sandbox, the
//! Git driver and the core types they share — plus `Cargo.lock`. `airlock`,
//! `airlock-broker`, `airlock-fs`, `airlock-sandbox-init` and
//! `airlock-git-driver` all link this crate, so one build gives them the
//! same fingerprint, and a build from other helper sources gives another. The Git commit is left out on
//! purpose: it would rebuild the workspace on every commit without telling
//! two builds of the same helper sources apart any better.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The crates whose sources a helper is built from (this one first).
const HELPER_CRATES: &[&str] = &[
    "airlock-fsproto",
    "airlock-broker",
    "airlock-fs",
    "airlock-hostfs",
    "airlock-sandbox",
    "airlock-git",
    "airlock-core",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => files(&path, out),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let crates = manifest.parent().expect("the crate sits in crates/").to_path_buf();
    let mut hash = Sha256::new();
    hash.update(std::env::var("CARGO_PKG_VERSION").unwrap_or_default().as_bytes());
    hash.update([0]);
    hash.update(std::env::var("AIRLOCK_BUILD_ID").unwrap_or_default().as_bytes());
    hash.update([0]);
    let mut sources = Vec::new();
    for name in HELPER_CRATES {
        let src = crates.join(name).join("src");
        println!("cargo:rerun-if-changed={}", src.display());
        files(&src, &mut sources);
        let cargo = crates.join(name).join("Cargo.toml");
        println!("cargo:rerun-if-changed={}", cargo.display());
        sources.push(cargo);
    }
    let lock = crates.parent().expect("crates/ sits in the workspace").join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    sources.push(lock);
    sources.sort();
    for path in &sources {
        let rel = path.strip_prefix(&crates).unwrap_or(path);
        hash.update(rel.to_string_lossy().as_bytes());
        hash.update([0]);
        hash.update(std::fs::read(path).unwrap_or_default());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=AIRLOCK_BUILD_FINGERPRINT={hex}");
    println!("cargo:rerun-if-env-changed=AIRLOCK_BUILD_ID");
    println!("cargo:rerun-if-changed=build.rs");
}
