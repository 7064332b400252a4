//! Issue 17 row: a whole file streamed through the named-root broker in
//! 64 KiB frames. One isolated submission copies a 64 MiB file with the
//! Python client (`airlock_fs.read` streams it in frames, checking its
//! version between frames; `airlock_fs.write` streams it back through a
//! chunked write that is committed by identity), beside `cp` of the same
//! file. Both sides include their start-up (the submission's: roots opened,
//! helpers sealed, broker confined, worker started). Target: airlock's
//! throughput at least 25% of `cp`'s (time ratio at most 4).

use crate::harness::{compare, Report, Target};
use crate::run_rows::{check, sibling_binary};
use std::process::Command;

const BYTES: u64 = 64 << 20;

const COPY: &str = "import airlock_fs\nairlock_fs.write('out', 'copy.bin', airlock_fs.read('data', 'big.bin'))\n";

/// 64 MiB read and written through the broker vs `cp`.
pub fn broker_copy_vs_cp(quick: bool) -> Result<Report, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path();
    let io = |e: std::io::Error| e.to_string();
    for dir in ["data", "bare"] {
        std::fs::create_dir_all(root.join(dir)).map_err(io)?;
    }
    let budget = 2 * BYTES;
    std::fs::write(
        root.join("airlock.toml"),
        format!("state_dir = \".airlock\"\n[broker]\ncalls = 1000000\nread_bytes = {budget}\nwrite_bytes = {budget}\n"),
    )
    .map_err(io)?;
    let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("data/big.bin"), block.repeat((BYTES >> 20) as usize)).map_err(io)?;
    let airlock = sibling_binary("airlock")?;
    let (mut n, mut m) = (0u32, 0u32);
    let candidate = || -> Result<(), String> {
        n += 1;
        let out = root.join(format!("out-{n}"));
        std::fs::create_dir_all(&out).map_err(io)?;
        let data = format!("data={}:r", root.join("data").display());
        let out_root = format!("out={}:w", out.display());
        let ran = Command::new(&airlock)
            .args(["isolated", "--root", &data, "--root", &out_root, "--", "python3", "-c", COPY])
            .current_dir(root)
            .output();
        let ran = check(ran, "airlock isolated").and_then(|()| {
            let copied = std::fs::metadata(out.join("copy.bin")).map_err(io)?.len();
            if copied == BYTES {
                Ok(())
            } else {
                Err(format!("the copy has {copied} bytes"))
            }
        });
        let _ = std::fs::remove_dir_all(&out);
        ran
    };
    let baseline = || -> Result<(), String> {
        m += 1;
        let out = root.join(format!("bare/copy-{m}.bin"));
        let copied = check(Command::new("cp").arg(root.join("data/big.bin")).arg(&out).output(), "cp");
        let _ = std::fs::remove_file(&out);
        copied
    };
    let samples = if quick { 3 } else { 9 };
    let (candidate, baseline) = compare(samples, candidate, baseline)?;
    Ok(Report {
        name: "broker copy 64 MiB (64 KiB frames) vs cp",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(4.0),
        bytes: Some(BYTES),
        samples,
        extra: Vec::new(),
    })
}
