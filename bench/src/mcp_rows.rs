//! Issue 8 rows: a `tools/call` round trip through a running `airlock mcp`
//! (stdio, one session) beside the same call made with `airlock run` (a
//! process per call); and calls/s with 4 concurrent MCP clients, each its
//! own `airlock mcp` session on one state directory. The MCP side does the
//! whole pipeline too (prepare, authorize, sandbox, publish); it saves the
//! process start and the per-process set-up. Target: MCP p50 at most the
//! `airlock run` p50.

use crate::harness::{compare_settled, throughput, Report, Target};
use crate::run_rows::{setup, Setup};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// One `airlock mcp` session, driven synchronously (one request at a time).
pub(crate) struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Session {
    pub(crate) fn start(s: &Setup) -> Result<Session, String> {
        Session::start_with(s, &s.airlock)
    }

    /// A session with `airlock mcp` of `airlock` (this build's, or another
    /// build's) in `s`'s project.
    pub(crate) fn start_with(s: &Setup, airlock: &std::path::Path) -> Result<Session, String> {
        let mut child = Command::new(airlock)
            .arg("mcp")
            .current_dir(&s.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("airlock mcp: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut session = Session { child, stdin, stdout, next_id: 1 };
        session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        )?;
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(session)
    }

    fn send(&mut self, msg: &Value) -> Result<(), String> {
        writeln!(self.stdin, "{msg}").and_then(|()| self.stdin.flush()).map_err(|e| e.to_string())
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("airlock mcp closed its stdout".into());
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
            if v["id"] == json!(id) {
                return Ok(v);
            }
        }
    }

    pub(crate) fn copy_once(&mut self, s: &Setup) -> Result<(), String> {
        let n = s.counter.fetch_add(1, Ordering::Relaxed);
        let out = format!("results/mcp-{n}.txt");
        let v =
            self.request("tools/call", json!({"name": "copy", "arguments": {"input": "data/in.txt", "output": out}}))?;
        if v["result"]["isError"] == json!(false) {
            Ok(())
        } else {
            Err(format!("tools/call failed: {v}"))
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tools/call` through `airlock mcp` vs `airlock run`, with calls/s at 4 MCP clients.
/// The bench's project, once its files are old enough for a server to keep
/// the catalog it reads ([`airlock_hostfs::SETTLED_AFTER`]): as a tools
/// directory is when it was not written just before the server started.
pub(crate) fn settled_setup() -> Result<Setup, String> {
    let s = setup()?;
    std::thread::sleep(airlock_hostfs::SETTLED_AFTER + std::time::Duration::from_millis(100));
    Ok(s)
}

/// Idle time after each timed call of the MCP rows: more than a warm
/// sandbox's refill waits and takes (`ANSWER_QUIET`, then a skeleton's
/// build) and than a sandbox's mount namespace waits before its release.
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_millis(20);

pub fn mcp_vs_run(quick: bool) -> Result<Report, String> {
    let s = settled_setup()?;
    let mut session = Session::start(&s)?;
    let samples = if quick { 10 } else { 60 };
    let (candidate, baseline) = compare_settled(samples, SETTLE, || session.copy_once(&s), || s.airlock_once())?;
    drop(session);
    let calls = if quick { 20 } else { 80 };
    let one = Mutex::new(Session::start(&s)?);
    let one_rate = throughput(1, calls, |_| one.lock().map_err(|_| "poisoned")?.copy_once(&s))?;
    let sessions: Vec<Mutex<Session>> = (0..4).map(|_| Session::start(&s).map(Mutex::new)).collect::<Result<_, _>>()?;
    let four_rate = throughput(4, calls, |i| sessions[i % 4].lock().map_err(|_| "poisoned")?.copy_once(&s))?;
    Ok(Report {
        name: "mcp tools/call vs airlock run (same manifest)",
        candidate,
        baseline,
        // Issue 22: with warm sandboxes, at most half.
        target: Target::TimeRatioAtMost(0.5),
        bytes: None,
        samples,
        extra: vec![format!(
            "MCP calls/s: 1 client {one_rate:.1}, 4 concurrent clients {four_rate:.1} (x{:.2})",
            four_rate / one_rate
        )],
    })
}

/// A governed `tools/call` through a running `airlock mcp` (warm sandboxes,
/// the default `[sandbox] warm_pool`) vs a bare `bwrap` run of the same
/// copy (issue 22: the MCP call's p50 below bwrap's). The MCP call does the
/// whole pipeline (manifest, Cedar, snapshot and hash, journal, sandbox,
/// synced publication); bwrap only the sandbox.
pub fn mcp_warm_vs_bwrap(quick: bool) -> Result<Report, String> {
    crate::run_rows::which("bwrap")?;
    let s = settled_setup()?;
    let mut session = Session::start(&s)?;
    // Let the pool fill before the first timed call.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let samples = if quick { 20 } else { 100 };
    let (candidate, baseline) = compare_settled(samples, SETTLE, || session.copy_once(&s), || s.bwrap_once())?;
    Ok(Report {
        name: "mcp tools/call (warm sandboxes) vs bwrap",
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(1.0),
        bytes: None,
        samples,
        extra: vec![],
    })
}
