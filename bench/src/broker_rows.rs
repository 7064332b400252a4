//! Issue 9 rows: the named-root broker.
//!
//! Per-operation latency of Read (4 KiB), Write (4 KiB, replacing) and List
//! (64 names) as a worker sees them, timed inside the worker by the Python
//! client around each call (client encode, airlock's checks and relay, the
//! broker's syscalls, the recovery record of a write, the answer), beside
//! the same syscalls made in-process by this benchmark on the same files.
//! Writes on both sides sync the file and the directory; the broker's also
//! syncs its recovery record. And the start-up cost of an isolated
//! submission (`airlock isolated … -- true`: roots opened, two helpers
//! sealed and hashed, broker confined, worker started, records cleaned)
//! beside a plain native `airlock run` of a tool that runs `true`.
//! The issue sets no target: these rows print ratios.

use crate::harness::{compare, summarize, Report, Summary, Target};
use crate::run_rows::{check, sibling_binary};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const OPS_PER_SUBMISSION: usize = 30;

const WORKER: &str = r#"
import airlock_fs, json, time
t = {"read": [], "write": [], "list": [], "reads": []}
payload = b"w" * 4096
for i in range(30):
    a = time.perf_counter_ns(); airlock_fs.read("data", "f.txt", 4096); t["read"].append(time.perf_counter_ns() - a)
    a = time.perf_counter_ns(); airlock_fs.write("out", "w.txt", payload); t["write"].append(time.perf_counter_ns() - a)
    a = time.perf_counter_ns(); airlock_fs.list("data", "many", 64); t["list"].append(time.perf_counter_ns() - a)
for i in range(30):
    a = time.perf_counter_ns(); airlock_fs.read("data", "f.txt", 4096); t["reads"].append(time.perf_counter_ns() - a)
print(json.dumps(t))
"#;

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    airlock: PathBuf,
}

fn setup() -> Result<Setup, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path().to_path_buf();
    let err = |e: std::io::Error| e.to_string();
    std::fs::create_dir_all(root.join("data/many")).map_err(err)?;
    std::fs::create_dir_all(root.join("out")).map_err(err)?;
    std::fs::create_dir_all(root.join("tools")).map_err(err)?;
    std::fs::write(root.join("data/f.txt"), vec![b'r'; 4096]).map_err(err)?;
    for i in 0..64 {
        std::fs::write(root.join(format!("data/many/n{i:02}")), "x").map_err(err)?;
    }
    // 120 calls a submission (the default budget is 100).
    std::fs::write(root.join("airlock.toml"), "state_dir = \".airlock\"\n[broker]\ncalls = 200\n").map_err(err)?;
    std::fs::write(
        root.join("tools/nothing.clad.toml"),
        "[tool]\nname = \"nothing\"\nversion = \"1\"\ndescription = \"runs true\"\n[command]\nexec = [\"true\"]\n",
    )
    .map_err(err)?;
    Ok(Setup { _tmp: tmp, root, airlock: sibling_binary("airlock")? })
}

impl Setup {
    fn isolated(&self, argv: &[&str]) -> Result<serde_json::Value, String> {
        let data = format!("data={}:rl", self.root.join("data").display());
        let out = format!("out={}:w", self.root.join("out").display());
        let output = Command::new(&self.airlock)
            .args(["isolated", "--root", &data, "--root", &out, "--"])
            .args(argv)
            .current_dir(&self.root)
            .output()
            .map_err(|e| e.to_string())?;
        let envelope: serde_json::Value = serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&output.stderr)))?;
        if envelope["status"] != "ok" {
            return Err(format!("airlock isolated: {envelope}"));
        }
        Ok(envelope)
    }

    /// One submission's per-operation times, in the worker: reads, writes
    /// and lists in turn, then reads back to back.
    fn worker_samples(&self) -> Result<[Vec<Duration>; 4], String> {
        let envelope = self.isolated(&["python3", "-c", WORKER])?;
        let text = envelope["content"]["output"]["raw_output"].as_str().ok_or("no output")?;
        let times: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let get = |k: &str| -> Vec<Duration> {
            times[k].as_array().into_iter().flatten().filter_map(|v| v.as_u64()).map(Duration::from_nanos).collect()
        };
        Ok([get("read"), get("write"), get("list"), get("reads")])
    }
}

fn io(e: rustix::io::Errno) -> String {
    e.to_string()
}

/// The same syscalls the broker makes, in this process.
struct InProcess {
    data: OwnedFd,
    out: OwnedFd,
}

impl InProcess {
    fn open(root: &Path) -> Result<InProcess, String> {
        let dir = |p: PathBuf| {
            rustix::fs::open(&p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(io)
        };
        Ok(InProcess { data: dir(root.join("data"))?, out: dir(root.join("out"))? })
    }

    fn read(&self) -> Result<(), String> {
        let fd =
            rustix::fs::openat(&self.data, "f.txt", OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(io)?;
        rustix::fs::fstat(&fd).map_err(io)?;
        let mut buf = vec![0u8; 4096];
        rustix::io::read(&fd, &mut buf).map_err(io)?;
        Ok(())
    }

    fn write(&self) -> Result<(), String> {
        let fd = rustix::fs::openat(
            &self.out,
            ".",
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io)?;
        rustix::io::write(&fd, &[b'w'; 4096]).map_err(io)?;
        rustix::fs::fsync(&fd).map_err(io)?;
        rustix::fs::linkat(&fd, "", &self.out, "stage", AtFlags::EMPTY_PATH).map_err(io)?;
        rustix::fs::renameat_with(&self.out, "stage", &self.out, "w-in-process.txt", RenameFlags::empty())
            .map_err(io)?;
        rustix::fs::fsync(&self.out).map_err(io)
    }

    fn list(&self) -> Result<(), String> {
        let fd = rustix::fs::openat(
            &self.data,
            "many",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let mut dir = rustix::fs::Dir::read_from(&fd).map_err(io)?;
        let mut names = Vec::with_capacity(66);
        while let Some(e) = dir.read() {
            names.push(e.map_err(io)?.file_name().to_owned());
        }
        names.sort();
        Ok(())
    }
}

fn time_n(n: usize, f: impl Fn() -> Result<(), String>) -> Result<Vec<Duration>, String> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f().map(|()| t.elapsed())
        })
        .collect()
}

/// Per-operation latency: submissions and in-process batches alternate.
pub fn operations(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    let local = InProcess::open(&s.root)?;
    let rounds = if quick { 2 } else { 6 };
    let (mut via, mut here): ([Vec<Duration>; 3], [Vec<Duration>; 3]) = Default::default();
    let mut back_to_back = Vec::new();
    s.worker_samples()?;
    for _ in 0..rounds {
        let [read, write, list, reads] = s.worker_samples()?;
        for (all, got) in via.iter_mut().zip([read, write, list]) {
            all.extend(got);
        }
        back_to_back.extend(reads);
        here[0].extend(time_n(OPS_PER_SUBMISSION, || local.read())?);
        here[1].extend(time_n(OPS_PER_SUBMISSION, || local.write())?);
        here[2].extend(time_n(OPS_PER_SUBMISSION, || local.list())?);
    }
    let sums: Vec<(Summary, Summary)> = via.into_iter().zip(here).map(|(a, b)| (summarize(a), summarize(b))).collect();
    let line = |name: &str, (a, b): &(Summary, Summary)| {
        format!(
            "{name}: broker p50 {:.3} ms p99 {:.3} ms | in-process p50 {:.3} ms p99 {:.3} ms | ratio {:.1}",
            a.p50.as_secs_f64() * 1e3,
            a.p99.as_secs_f64() * 1e3,
            b.p50.as_secs_f64() * 1e3,
            b.p99.as_secs_f64() * 1e3,
            a.p50.as_secs_f64() / b.p50.as_secs_f64()
        )
    };
    Ok(Report {
        name: "broker read/write/list vs in-process syscalls",
        candidate: sums[0].0,
        baseline: sums[0].1,
        // Issue 22's goal for the hop: a 4 KiB read at most 0.1 ms (p50).
        target: Target::P50AtMost(Duration::from_micros(100)),
        bytes: None,
        samples: rounds * OPS_PER_SUBMISSION,
        extra: vec![
            line("read 4 KiB", &sums[0]),
            line("write 4 KiB (replace)", &sums[1]),
            line("list 64 names", &sums[2]),
            "(the row's own numbers are the read; times are the worker's, Python client included)".into(),
            format!(
                "read 4 KiB, 30 more back to back after the row's (which each follow a synced write and a list): \
                 broker p50 {:.3} ms",
                summarize(back_to_back).p50.as_secs_f64() * 1e3
            ),
        ],
    })
}

/// Start-up: an isolated submission that runs `true` vs `airlock run` of a
/// manifest that runs `true`.
pub fn startup(quick: bool) -> Result<Report, String> {
    let s = setup()?;
    let samples = if quick { 10 } else { 40 };
    let run = || check(Command::new(&s.airlock).args(["run", "nothing"]).current_dir(&s.root).output(), "airlock run");
    let (candidate, baseline) = compare(samples, || s.isolated(&["true"]).map(|_| ()), run)?;
    Ok(Report {
        name: "airlock isolated start-up vs airlock run",
        candidate,
        baseline,
        target: Target::ForScale,
        bytes: None,
        samples,
        extra: Vec::new(),
    })
}
