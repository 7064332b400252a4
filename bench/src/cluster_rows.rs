//! Issue 23 row: a trivial call through the cluster (a real `nats-server`
//! with JetStream on loopback, one `airlock worker` on this host's native
//! tier) beside the same call run locally, alternately. Target: the cluster
//! adds at most 15 ms to the local p50. Printed under it: calls/s of four
//! concurrent callers with one worker and with two (both compete with the
//! callers, the server and the edge for this host's cores), and what the
//! journal's mirror to the cluster adds to a local call.

use crate::harness::{compare, throughput, Report, Target};
use crate::run_rows::{check, setup_with, Setup};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, bound: Duration, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > bound {
            return Err(format!("{what} was not ready within {} s", bound.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn nats_server(dir: &std::path::Path) -> Result<(Killed, String), String> {
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nats-server (apt-get install nats-server): {e}"))?;
    let server = Killed(child);
    wait_for("nats-server", Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())?;
    Ok((server, format!("nats://127.0.0.1:{port}")))
}

/// A worker in a directory of its own under the edge's, its key pinned.
fn worker(s: &Setup, url: &str, n: usize) -> Result<Killed, String> {
    let dir = s.root.join(format!("worker-{n}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("airlock.toml"), format!("state_dir = \".airlock\"\n[cluster]\nnats = \"{url}\"\n"))
        .map_err(|e| e.to_string())?;
    check(Command::new(&s.airlock).args(["journal", "show", "--json"]).current_dir(&dir).output(), "worker key")?;
    let key = std::fs::read_to_string(dir.join(".airlock/journal.pub")).map_err(|e| e.to_string())?;
    check(
        Command::new(&s.airlock).args(["cluster", "trust", "worker", key.trim()]).current_dir(&s.root).output(),
        "airlock cluster trust",
    )?;
    let log = std::fs::File::create(dir.join("worker.log")).map_err(|e| e.to_string())?;
    let child = Command::new(&s.airlock)
        .arg("worker")
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("airlock worker: {e}"))?;
    let child = Killed(child);
    wait_for("airlock worker", Duration::from_secs(10), || {
        std::fs::read_to_string(dir.join("worker.log")).is_ok_and(|l| l.contains("serving"))
    })?;
    Ok(child)
}

/// A trivial call through the cluster vs the same call run locally.
pub fn cluster_vs_local(quick: bool) -> Result<Report, String> {
    let js = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (_server, url) = nats_server(js.path())?;
    // The dispatch alone: the journal's mirror (below, for information)
    // would add the same to both sides.
    let s = setup_with(&format!("[cluster]\nnats = \"{url}\"\njournal = \"off\"\n"))?;
    check(Command::new(&s.airlock).args(["cluster", "init"]).current_dir(&s.root).output(), "airlock cluster init")?;
    let first = worker(&s, &url, 1)?;
    let samples = if quick { 10 } else { 60 };
    let remote = || s.airlock_with(&["--tier", "cluster"]);
    let (candidate, baseline) = compare(samples, remote, || s.airlock_once())?;
    let calls = if quick { 16 } else { 64 };
    let one = throughput(4, calls, |_| remote())?;
    let second = worker(&s, &url, 2)?;
    let two = throughput(4, calls, |_| remote())?;
    let local = throughput(4, calls, |_| s.airlock_once())?;
    drop((first, second));
    let mirrored = setup_with(&format!("[cluster]\nnats = \"{url}\"\n"))?;
    let (with_mirror, without) = compare(samples, || mirrored.airlock_once(), || s.airlock_once())?;
    Ok(Report {
        name: "cluster: airlock run via NATS + worker vs local",
        candidate,
        baseline,
        target: Target::P50AddsAtMost(Duration::from_millis(15)),
        bytes: None,
        samples,
        extra: vec![
            format!(
                "4 concurrent callers: 1 worker {one:.1} calls/s, 2 workers {two:.1} calls/s, local {local:.1} calls/s \
                 (2 cores shared by callers, edge, server and workers)"
            ),
            format!(
                "journal mirror ([cluster] journal = \"hashes\"): a local call p50 {:.3} ms with it, {:.3} ms without",
                with_mirror.p50.as_secs_f64() * 1e3,
                without.p50.as_secs_f64() * 1e3
            ),
        ],
    })
}
