//! The benchmark rows.

use crate::harness::{compare, Report, Target};
use airlock_core::RelPath;
use airlock_hostfs::{Dir, HostAuthority, InputFile, PrivateDir, Resolver};
use std::process::Command;

/// A named row.
pub struct Row {
    /// Name printed and matched by filters.
    pub name: &'static str,
    /// Runs it; `quick` uses fewer samples.
    pub run: Run,
}

/// How a row runs: most print one report, some several (each with its own
/// target).
pub enum Run {
    /// One report.
    One(fn(bool) -> Result<Report, String>),
    /// Several reports, printed in order.
    Several(fn(bool) -> Result<Vec<Report>, String>),
}

impl Run {
    /// The row's reports; `quick` uses fewer samples.
    pub fn reports(&self, quick: bool) -> Result<Vec<Report>, String> {
        match self {
            Run::One(run) => run(quick).map(|report| vec![report]),
            Run::Several(run) => run(quick),
        }
    }
}

/// Every row, in the order they are printed.
pub const ALL: &[Row] = &[
    Row { name: "snapshot+hash 32 MiB vs sha256sum", run: Run::One(snapshot_vs_sha256sum) },
    Row { name: "airlock run trivial tool vs bwrap", run: Run::One(crate::run_rows::run_vs_bwrap) },
    Row { name: "airlock run trivial tool vs nsjail", run: Run::One(crate::run_rows::run_vs_nsjail) },
    Row { name: "airlock run trivial tool vs runsc do", run: Run::One(crate::run_rows::run_vs_runsc_do) },
    Row { name: "airlock run trivial tool vs bare command", run: Run::One(crate::run_rows::run_vs_bare) },
    Row {
        name: "airlock run: sandbox started during preparation vs after it",
        run: Run::One(crate::run_rows::run_prestarted_vs_after),
    },
    Row { name: "journal: 7 records (one run's worth) vs the run", run: Run::One(crate::run_rows::journal_share) },
    Row { name: "authorize: 100 Cedar policies vs 1", run: Run::One(crate::policy_rows::authorization_latency) },
    Row {
        name: "staging admission: 20 processes vs uncontended",
        run: Run::One(crate::staging_rows::admission_under_contention),
    },
    Row { name: "grep_files 8 MiB (in-process) vs rg -F --no-ignore", run: Run::One(crate::source_rows::grep_vs_rg) },
    Row { name: "list_files (in-process) vs find -printf", run: Run::One(crate::source_rows::list_vs_find) },
    Row { name: "git_status 5,000 files vs git status", run: Run::One(crate::git_rows::git_status_vs_git) },
    Row { name: "mcp tools/call vs airlock run (same manifest)", run: Run::One(crate::mcp_rows::mcp_vs_run) },
    Row { name: "mcp tools/call (warm sandboxes) vs bwrap", run: Run::One(crate::mcp_rows::mcp_warm_vs_bwrap) },
    Row {
        name: "airlock run: this build vs AIRLOCK_BENCH_OTHER",
        run: Run::One(crate::build_rows::run_vs_other_build),
    },
    Row {
        name: "mcp tools/call: this build vs AIRLOCK_BENCH_OTHER",
        run: Run::One(crate::build_rows::mcp_vs_other_build),
    },
    Row {
        name: "git_status: this build vs AIRLOCK_BENCH_OTHER",
        run: Run::One(crate::build_rows::git_status_vs_other_build),
    },
    Row { name: "mcp --http read_file (token) vs stdio", run: Run::One(crate::mcp_http_rows::http_vs_stdio) },
    Row { name: "broker read/write/list vs in-process syscalls", run: Run::One(crate::broker_rows::operations) },
    Row { name: "airlock isolated start-up vs airlock run", run: Run::One(crate::broker_rows::startup) },
    Row { name: "airlock run copy 1 GiB vs openssl dgst + cp", run: Run::One(crate::large_rows::one_gib_copy) },
    Row {
        name: "broker copy 64 MiB (64 KiB frames): read, write vs cp",
        run: Run::Several(crate::stream_rows::broker_read_write_vs_cp),
    },
    Row { name: "tier native: airlock run vs bare runsc run", run: Run::One(crate::tier_rows::native_vs_runsc) },
    Row { name: "tier gvisor: airlock run vs bare runsc run", run: Run::One(crate::tier_rows::gvisor_vs_runsc) },
    Row { name: "tier docker: airlock run vs docker run --rm", run: Run::One(crate::tier_rows::docker_vs_docker_run) },
    Row {
        name: "tier docker+runsc: airlock run vs docker run --runtime runsc",
        run: Run::One(crate::tier_rows::docker_runsc_vs_docker_run),
    },
    Row {
        name: "session: one python3 interaction vs the REPL over a bare pty",
        run: Run::One(crate::session_rows::interaction_vs_bare_pty),
    },
    Row {
        name: "session over MCP: one python3 interaction vs the REPL over a bare pty",
        run: Run::One(crate::session_rows::interaction_over_mcp_vs_bare_pty),
    },
    Row {
        name: "cluster: airlock run via NATS + worker vs local",
        run: Run::One(crate::cluster_rows::cluster_vs_local),
    },
    Row {
        name: "tier microvm: airlock run vs bare qemu boot",
        run: Run::One(crate::microvm_rows::microvm_vs_bare_qemu),
    },
];

const SNAPSHOT_BYTES: u64 = 32 * 1024 * 1024;

/// Issue 2: snapshot-and-hash of one 32 MiB file (open through the
/// resolver, bounded read, SHA-256 while reading, copy into a private
/// snapshot file) vs `sha256sum` of the same file. Target: airlock's
/// throughput at least 0.9x sha256sum's, i.e. time ratio <= 1/0.9.
fn snapshot_vs_sha256sum(quick: bool) -> Result<Report, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).map_err(|e| e.to_string())?;
    let file = data.join("big.bin");
    let mut bytes = vec![0u8; SNAPSHOT_BYTES as usize];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in bytes.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&file, &bytes).map_err(|e| e.to_string())?;
    drop(bytes);

    let authority = HostAuthority::ambient();
    let resolver = Resolver::new(airlock_core::ResolverChoice::Auto).map_err(|e| e.to_string())?;
    let ceiling = Dir::open_ceiling(&authority, &data).map_err(|e| e.to_string())?;
    let state = PrivateDir::open_or_create(&authority, &tmp.path().join("state")).map_err(|e| e.to_string())?;
    let rel = RelPath::parse("big.bin").unwrap();
    let mut n = 0u64;
    let airlock = || -> Result<(), String> {
        n += 1;
        let name = format!("snap-{n}");
        let input = InputFile::open(&resolver, &ceiling, &rel, &rel, SNAPSHOT_BYTES).map_err(|e| e.to_string())?;
        let mut dest = state.create_file(&name).map_err(|e| e.to_string())?;
        input.snapshot_into(&mut dest, SNAPSHOT_BYTES).map_err(|e| e.to_string())?;
        drop(dest);
        state.remove_tree(&name).map_err(|e| e.to_string())
    };
    let sha256sum = || -> Result<(), String> {
        let out = Command::new("sha256sum").arg(&file).output().map_err(|e| format!("sha256sum: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err("sha256sum failed".into())
        }
    };
    let samples = if quick { 5 } else { 21 };
    let (candidate, baseline) = compare(samples, airlock, sha256sum)?;
    Ok(Report {
        name: ALL[0].name,
        extra: Vec::new(),
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.0 / 0.9),
        bytes: Some(SNAPSHOT_BYTES),
        samples,
    })
}
