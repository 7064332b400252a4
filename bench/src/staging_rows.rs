//! Issue 7 row: admission to the shared staging pool (admit, then release:
//! a lock, one read of the pool's index and a bounded liveness check, a
//! record written and removed, a data directory created and removed) while
//! 19 other processes behave like concurrent callers on the same pool
//! (admit, hold the reservation 5 ms as a copy would, release, pause up to
//! 10 ms, again), beside the same admission uncontended. The other
//! processes are this binary re-executed with [`CONTEND_ARG`]. (Contenders
//! that loop without pause measure 20 processes sharing 2 cores, not the
//! pool.)

use crate::harness::{compare, Report, Target};
use airlock_core::StagingLimits;
use airlock_hostfs::{HostAuthority, PrivateDir};
use airlock_staging::{Pool, Purpose, Request};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Hidden argument: `airlock-bench __contend STATE SECONDS` loops admissions.
pub const CONTEND_ARG: &str = "__contend";
const CONTENDERS: usize = 19;

fn open(state: &Path) -> Result<Pool, String> {
    let state = PrivateDir::open_or_create(&HostAuthority::ambient(), state).map_err(|e| e.to_string())?;
    // Room for every process: the row measures the lock and the reap, not refusals.
    Pool::open(&state, StagingLimits { max_snapshots: 64, ..StagingLimits::default() }).map_err(|e| e.to_string())
}

fn admit_release(pool: &Pool, id: &str) -> Result<(), String> {
    let request = Request { invocation_id: id.to_owned(), purpose: Purpose::Call, bytes: 64 * 1024, files: 2 };
    pool.admit(&request).map_err(|e| e.to_string())?.release().map_err(|e| e.to_string())
}

/// The contender's loop (runs in a child process until its time is up).
pub fn contend(args: &[String]) -> Result<(), String> {
    let [state, seconds] = args else { return Err("usage: __contend STATE SECONDS".into()) };
    let pool = open(Path::new(state))?;
    let until = Instant::now() + Duration::from_secs(seconds.parse().map_err(|_| "bad seconds")?);
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let request = Request {
            invocation_id: format!("contender-{}-{n}", std::process::id()),
            purpose: Purpose::Call,
            bytes: 64 * 1024,
            files: 2,
        };
        let lease = pool.admit(&request).map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(5));
        lease.release().map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_micros(u64::from(std::process::id() % 7 + n as u32 % 11) * 900));
    }
    Ok(())
}

/// Contended vs uncontended admission latency.
pub fn admission_under_contention(quick: bool) -> Result<Report, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (busy_state, calm_state) = (tmp.path().join("busy"), tmp.path().join("calm"));
    let (busy, calm) = (open(&busy_state)?, open(&calm_state)?);
    let samples = if quick { 50 } else { 400 };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let seconds = if quick { "20" } else { "60" };
    let mut contenders: Vec<Child> = (0..CONTENDERS)
        .map(|_| Command::new(&exe).arg(CONTEND_ARG).arg(&busy_state).arg(seconds).spawn())
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let (mut busy_n, mut calm_n) = (0u64, 0u64);
    let result = compare(
        samples,
        || {
            busy_n += 1;
            admit_release(&busy, &format!("bench-{busy_n}"))
        },
        || {
            calm_n += 1;
            admit_release(&calm, &format!("calm-{calm_n}"))
        },
    );
    for c in &mut contenders {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (candidate, baseline) = result?;
    let left = busy.gc().map_err(|e| e.to_string())?;
    Ok(Report {
        name: "staging admission: 20 processes vs uncontended",
        candidate,
        baseline,
        // An admission is on every call's path: 20 concurrent callers may
        // cost it at most 2x its uncontended time (issue 22).
        target: Target::TimeRatioAtMost(2.0),
        bytes: None,
        samples,
        extra: vec![format!(
            "{CONTENDERS} contending processes killed at the end; gc after them released {} reservation(s)",
            left.released.len()
        )],
    })
}
