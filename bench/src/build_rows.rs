//! This build against another one, alternated call by call: `airlock run`
//! of the trivial tool, a `tools/call` through one `airlock mcp` of each
//! build, and `airlock query git_status` of the 5,000-file repository.
//! `AIRLOCK_BENCH_OTHER` names a directory holding the other build's
//! `airlock` (with the `airlock-sandbox-init` it pairs with, if it uses
//! one). This host's latency drifts by ±10% within an hour, more than one
//! step of issue 22 changes a call, so the rows against bwrap cannot show
//! such a step; two builds alternated in one run meet the same drift, and
//! their ratio is the evidence a change is measured by (DESIGN, "One
//! `airlock run`, step by step"). Both builds share the project and its
//! state directory, as two releases on one host do.

use crate::harness::{compare, compare_settled, Report, Summary, Target};
use crate::mcp_rows::{settled_setup, Session, SETTLE};
use crate::run_rows::setup;
use std::path::PathBuf;

/// The other build's `airlock`, from `AIRLOCK_BENCH_OTHER`.
fn other_airlock() -> Result<PathBuf, String> {
    let dir = std::env::var_os("AIRLOCK_BENCH_OTHER")
        .ok_or("AIRLOCK_BENCH_OTHER is not set (a directory holding another build's airlock)")?;
    let airlock = PathBuf::from(dir).join("airlock");
    if airlock.is_file() {
        Ok(airlock)
    } else {
        Err(format!("{} is missing", airlock.display()))
    }
}

/// `airlock run` of the copy tool by this build vs by the other.
pub fn run_vs_other_build(quick: bool) -> Result<Report, String> {
    let other = other_airlock()?;
    let s = setup()?;
    let samples = if quick { 40 } else { 150 };
    let timed = compare(samples, || s.airlock_once(), || s.binary_with(&other, &[]))?;
    Ok(report("airlock run: this build vs AIRLOCK_BENCH_OTHER", timed, samples))
}

/// A `tools/call` through this build's `airlock mcp` vs through the
/// other's, each server idle between its calls.
pub fn mcp_vs_other_build(quick: bool) -> Result<Report, String> {
    let other = other_airlock()?;
    let s = settled_setup()?;
    let mut ours = Session::start(&s)?;
    let mut theirs = Session::start_with(&s, &other)?;
    let samples = if quick { 60 } else { 200 };
    let timed = compare_settled(samples, SETTLE, || ours.copy_once(&s), || theirs.copy_once(&s))?;
    Ok(report("mcp tools/call: this build vs AIRLOCK_BENCH_OTHER", timed, samples))
}

/// `airlock query git_status` by this build vs by the other, one
/// repository and state directory.
pub fn git_status_vs_other_build(quick: bool) -> Result<Report, String> {
    let other = other_airlock()?;
    let ours = crate::run_rows::sibling_binary("airlock")?;
    let project = crate::git_rows::GitProject::new()?;
    let samples = if quick { 10 } else { 41 };
    let timed = compare(samples, || project.query_with(&ours), || project.query_with(&other))?;
    Ok(report("git_status: this build vs AIRLOCK_BENCH_OTHER", timed, samples))
}

/// A row with no target: this build's times against the other's.
fn report(name: &'static str, (candidate, baseline): (Summary, Summary), samples: usize) -> Report {
    Report { name, candidate, baseline, target: Target::ForScale, bytes: None, samples, extra: vec![] }
}
