//! Computes the broker's implementation hash: SHA-256 over the names and
//! bytes of every file under `src/` (sorted by path), exported to the crate
//! as `AIRLOCK_SOURCE_BROKER_SHA256`.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("src/ is readable").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    let src = Path::new("src");
    let mut list = Vec::new();
    files(src, &mut list);
    let mut hasher = Sha256::new();
    for p in &list {
        let rel = p.strip_prefix(src).expect("under src").to_string_lossy().replace('\\', "/");
        let bytes = std::fs::read(p).expect("source file is readable");
        hasher.update((rel.len() as u64).to_be_bytes());
        hasher.update(rel.as_bytes());
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(&bytes);
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rustc-env=AIRLOCK_SOURCE_BROKER_SHA256=sha256:{}", hex::encode(hasher.finalize()));
}
