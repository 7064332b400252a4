//! Issue 17 row: a whole file streamed through the named-root broker in
//! 64 KiB frames, read and written separately, beside `cp` of the same
//! file.
//!
//! One isolated submission reads a 64 MiB file with the Python client
//! (`airlock_fs.read` streams it in frames, checking its version between
//! frames) and writes it back (`airlock_fs.write`: a chunked write, synced
//! and committed by identity); the worker times each call
//! (`time.perf_counter_ns`) and prints the times. Submissions and `cp` runs
//! alternate. Target: the broker's read throughput and its write
//! throughput each at least 25% of `cp`'s (time ratio at most 4). The
//! whole submission (roots opened, helpers sealed, broker confined, worker
//! started, then the read and the write) is printed under the write, and
//! the SHA-256 of the same bytes in this process (what the relay computes
//! of every byte it relays) under the read, both for information.

use crate::harness::{summarize, Report, Target};
use crate::run_rows::{check, sibling_binary};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BYTES: u64 = 64 << 20;

/// Reads the file, writes it back, prints both times (nanoseconds).
const WORKER: &str = "import airlock_fs, json, time
a = time.perf_counter_ns()
data = airlock_fs.read('data', 'big.bin')
b = time.perf_counter_ns()
airlock_fs.write('out', 'copy.bin', data)
c = time.perf_counter_ns()
print(json.dumps({'read': b - a, 'write': c - b}))
";

/// One submission's times: the read and the write (in the worker), and the
/// whole submission (from here).
struct Sample {
    read: Duration,
    write: Duration,
    whole: Duration,
}

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    airlock: PathBuf,
    /// The file's bytes, to check each copy against.
    content: Vec<u8>,
}

fn io(e: std::io::Error) -> String {
    e.to_string()
}

fn setup() -> Result<Setup, String> {
    let tmp = tempfile::tempdir().map_err(io)?;
    let root = tmp.path().to_path_buf();
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
    let content = block.repeat((BYTES >> 20) as usize);
    std::fs::write(root.join("data/big.bin"), &content).map_err(io)?;
    Ok(Setup { _tmp: tmp, root, airlock: sibling_binary("airlock")?, content })
}

impl Setup {
    /// One submission (the `n`th): its times, once the copy it wrote is
    /// checked.
    fn submission(&self, n: u32) -> Result<Sample, String> {
        let out = self.root.join(format!("out-{n}"));
        std::fs::create_dir_all(&out).map_err(io)?;
        let sample = self.submit(&out);
        let _ = std::fs::remove_dir_all(&out);
        sample
    }

    fn submit(&self, out: &Path) -> Result<Sample, String> {
        let data = format!("data={}:r", self.root.join("data").display());
        let out_root = format!("out={}:w", out.display());
        let start = Instant::now();
        let ran = Command::new(&self.airlock)
            .args(["isolated", "--root", &data, "--root", &out_root, "--", "python3", "-c", WORKER])
            .current_dir(&self.root)
            .output()
            .map_err(|e| format!("airlock isolated: {e}"))?;
        let whole = start.elapsed();
        let envelope: serde_json::Value = serde_json::from_slice(&ran.stdout)
            .map_err(|e| format!("airlock isolated: {e}: {}", String::from_utf8_lossy(&ran.stderr)))?;
        if envelope["status"] != "ok" {
            return Err(format!("airlock isolated: {envelope}"));
        }
        let text = envelope["content"]["output"]["raw_output"].as_str().ok_or("no output")?;
        let times: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| format!("{e}: {text}"))?;
        let time = |k: &str| times[k].as_u64().map(Duration::from_nanos).ok_or(format!("no {k} time in {text}"));
        let (read, write) = (time("read")?, time("write")?);
        if std::fs::read(out.join("copy.bin")).map_err(io)? != self.content {
            return Err("the copy differs from the file".into());
        }
        Ok(Sample { read, write, whole })
    }

    /// SHA-256 of the file's bytes in this process, timed: what the relay
    /// computes of every byte it relays (the evidence's hash), the way its
    /// hashing thread gets them, a 64 KiB frame at a time in a recycled
    /// buffer (hashing the 64 MiB where they lie is slower here, about
    /// 54 ms against 42: the SHA-NI loop outruns the prefetcher).
    fn hash(&self) -> Duration {
        use sha2::Digest;
        let mut frame = vec![0u8; 64 << 10];
        let start = Instant::now();
        let mut hasher = sha2::Sha256::new();
        for chunk in self.content.chunks(frame.len()) {
            frame[..chunk.len()].copy_from_slice(chunk);
            hasher.update(&frame[..chunk.len()]);
        }
        std::hint::black_box(hasher.finalize());
        start.elapsed()
    }

    /// `cp` of the same file (the `m`th), timed.
    fn cp(&self, m: u32) -> Result<Duration, String> {
        let out = self.root.join(format!("bare/copy-{m}.bin"));
        let start = Instant::now();
        let copied = check(Command::new("cp").arg(self.root.join("data/big.bin")).arg(&out).output(), "cp");
        let took = start.elapsed();
        let _ = std::fs::remove_file(&out);
        copied.map(|()| took)
    }
}

/// 64 MiB read, and written, through the broker (timed in the worker) vs
/// `cp`.
pub fn broker_read_write_vs_cp(quick: bool) -> Result<Vec<Report>, String> {
    let s = setup()?;
    let samples = if quick { 5 } else { 11 };
    // One warm-up of each side.
    s.submission(0)?;
    s.cp(0)?;
    let (mut via, mut cp) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    let mut hashed = Vec::with_capacity(samples);
    for i in 1..=samples as u32 {
        hashed.push(s.hash());
        // Alternate which side goes first so drift hits both equally.
        if i % 2 == 0 {
            via.push(s.submission(i)?);
            cp.push(s.cp(i)?);
        } else {
            cp.push(s.cp(i)?);
            via.push(s.submission(i)?);
        }
    }
    let baseline = summarize(cp);
    let summary = |f: fn(&Sample) -> Duration| summarize(via.iter().map(f).collect());
    let report = |name, candidate, extra| Report {
        name,
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(4.0),
        bytes: Some(BYTES),
        samples,
        extra,
    };
    let whole = summary(|s| s.whole);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let info = format!(
        "whole submission (start-up, read and write): p50 {:.3} ms p99 {:.3} ms, {:.1}x cp (for information)",
        ms(whole.p50),
        ms(whole.p99),
        whole.p50.as_secs_f64() / baseline.p50.as_secs_f64()
    );
    let hash = summarize(hashed);
    let floor = format!(
        "SHA-256 of the same 64 MiB in this process, in 64 KiB frames (the relay hashes every byte it relays): p50 \
         {:.3} ms, {:.2}x cp (for information)",
        ms(hash.p50),
        hash.p50.as_secs_f64() / baseline.p50.as_secs_f64()
    );
    Ok(vec![
        report("broker read 64 MiB (64 KiB frames) vs cp", summary(|s| s.read), vec![floor]),
        report("broker write 64 MiB (64 KiB frames) vs cp", summary(|s| s.write), vec![info]),
    ])
}
