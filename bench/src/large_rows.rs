//! Issue 17 row: one large file through the whole pipeline. `airlock run`
//! of a copy tool on a 1 GiB input (raised `[limits]`) holds the input
//! under a read lease and hashes it in place (no copy into staging), binds
//! it and the output's staging file into the worker, runs `cp`, then
//! hashes the output while it is synced and renames it into place; the
//! baseline is `openssl dgst -sha256` of the input followed by `cp` of it,
//! the least a hashed copy costs. Target: at most 1.5x.
//!
//! Under the row, the same call against two more baselines, each with its
//! ratio and the same target:
//! - a durable hashed copy (the baseline plus `sync` of the copy):
//!   airlock's publication is synced before it is journaled, which the
//!   row's baseline is not;
//! - the floor of any hashed, durable publication of a tool's output: the
//!   input's hash (the descriptor, and so policy, needs it before the tool
//!   runs), the copy, then the output's hash beside its `sync` (the
//!   receipt's hash is of the published bytes). What is over 1.0 here is
//!   airlock's own cost.

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
    let mut d = 0u32;
    let durable = || -> Result<(), String> {
        d += 1;
        let out = root.join(format!("bare/durable-{d}.bin"));
        check(Command::new("openssl").args(["dgst", "-sha256"]).arg(&input).output(), "openssl dgst")?;
        let copied = check(Command::new("cp").arg(&input).arg(&out).output(), "cp")
            .and_then(|()| check(Command::new("sync").arg(&out).output(), "sync"));
        let _ = std::fs::remove_file(&out);
        copied
    };
    let mut f = 0u32;
    let floor = || -> Result<(), String> {
        f += 1;
        let out = root.join(format!("bare/floor-{f}.bin"));
        check(Command::new("openssl").args(["dgst", "-sha256"]).arg(&input).output(), "openssl dgst")?;
        check(Command::new("cp").arg(&input).arg(&out).output(), "cp")?;
        let sync = Command::new("sync").arg(&out).spawn().map_err(|e| format!("sync: {e}"))?;
        let hashed = check(Command::new("openssl").args(["dgst", "-sha256"]).arg(&out).output(), "openssl dgst");
        let synced = check(sync.wait_with_output(), "sync");
        let _ = std::fs::remove_file(&out);
        hashed.and(synced)
    };
    let samples = if quick { 3 } else { 7 };
    let (mut candidate, mut baseline) = (candidate, baseline);
    let (main, base) = compare(samples, &mut candidate, &mut baseline)?;
    let line = |what: &str, (a, b): (crate::harness::Summary, crate::harness::Summary)| {
        let ratio = a.p50.as_secs_f64() / b.p50.as_secs_f64();
        format!(
            "against {what} (3 runs each): airlock p50 {:.0} ms, baseline p50 {:.0} ms, ratio {ratio:.3} (target \
             <= 1.500) {}",
            a.p50.as_secs_f64() * 1e3,
            b.p50.as_secs_f64() * 1e3,
            if ratio <= 1.5 { "MET" } else { "MISSED" }
        )
    };
    let extra = vec![
        line("openssl dgst + cp + sync of the copy", compare(3, &mut candidate, durable)?),
        line("the floor: openssl dgst of the input, cp, openssl dgst of the copy beside its sync", {
            compare(3, &mut candidate, floor)?
        }),
    ];
    let (candidate, baseline) = (main, base);
    Ok(Report {
        name: "airlock run copy 1 GiB vs openssl dgst + cp",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.5),
        bytes: Some(GIB),
        samples,
        extra,
    })
}
