//! Issue 17 row: one large file through the whole pipeline. `airlock run`
//! of a copy tool on a 1 GiB input (raised `[limits]`) snapshots and hashes
//! the input, copies it into the worker, runs `cp`, exports the output,
//! hashes it into a synced candidate and publishes it; the baseline is
//! `openssl dgst -sha256` of the input followed by `cp` of it, the least a
//! hashed copy costs. Target: at most 1.5x.

use crate::harness::{compare, Report, Target};
use crate::run_rows::{check, sibling_binary, TOOL};
use std::io::Write;
use std::process::Command;

const GIB: u64 = 1 << 30;

/// `airlock run` copy of 1 GiB vs `openssl dgst -sha256` + `cp`.
pub fn one_gib_copy(quick: bool) -> Result<Report, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path();
    let io = |e: std::io::Error| e.to_string();
    for dir in ["data", "results", "bare", "tools"] {
        std::fs::create_dir_all(root.join(dir)).map_err(io)?;
    }
    std::fs::write(
        root.join("airlock.toml"),
        format!(
            "[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n[limits]\nmax_input_file_bytes = \
             {GIB}\nmax_input_bytes = {GIB}\nmax_file_bytes = {GIB}\n[staging]\nmax_bytes = {}\n",
            3 * GIB
        ),
    )
    .map_err(io)?;
    std::fs::write(root.join("tools/copy.clad.toml"), format!("{TOOL}max_file_bytes = {GIB}\n")).map_err(io)?;
    let input = root.join("data/big.bin");
    let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 + 1).collect();
    let mut f = std::fs::File::create(&input).map_err(io)?;
    for _ in 0..1024 {
        f.write_all(&block).map_err(io)?;
    }
    f.sync_all().map_err(io)?;
    drop(f);
    let airlock = sibling_binary("airlock")?;
    let mut n = 0u32;
    let mut m = 0u32;
    let candidate = || -> Result<(), String> {
        n += 1;
        let out = format!("results/out-{n}.bin");
        let ran = check(
            Command::new(&airlock).args(["run", "copy", "data/big.bin", &out]).current_dir(root).output(),
            "airlock run",
        );
        let _ = std::fs::remove_file(root.join(&out));
        ran
    };
    let baseline = || -> Result<(), String> {
        m += 1;
        let out = root.join(format!("bare/out-{m}.bin"));
        check(Command::new("openssl").args(["dgst", "-sha256"]).arg(&input).output(), "openssl dgst")?;
        let copied = check(Command::new("cp").arg(&input).arg(&out).output(), "cp");
        let _ = std::fs::remove_file(&out);
        copied
    };
    let samples = if quick { 3 } else { 7 };
    let (candidate, baseline) = compare(samples, candidate, baseline)?;
    Ok(Report {
        name: "airlock run copy 1 GiB vs openssl dgst + cp",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.5),
        bytes: Some(GIB),
        samples,
        extra: Vec::new(),
    })
}
