//! Test helper binary (not shipped): the sandbox init for the integration
//! tests, and — with `run` — a caller that reads one request (JSON) on
//! stdin, runs it on the native tier with itself as the init, and prints
//! the outcome (or the error) as JSON. The tests start it under `setpriv`
//! to exercise the sandbox as an unprivileged user.
use std::fs::{File, OpenOptions};
use std::time::Duration;

use airlock_sandbox::{NativeTier, StagedInput, StagedOutput, Tier, Worker, WorkerSpec};
use serde::{Deserialize, Serialize};

/// One run, as the tests describe it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Request {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    inputs: Vec<(String, String)>,
    output: Option<(String, String, u64)>,
    timeout_ms: u64,
    stdout_limit: usize,
    file_size: u64,
}

fn main() {
    airlock_sandbox::init::maybe_run_init();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("probe-program") {
        probe_program();
    }
    if args.get(1).map(String::as_str) == Some("warm-hold") {
        warm_hold(&args[2]);
    }
    if args.get(1).map(String::as_str) != Some("run") {
        eprintln!("usage: airlock-sandbox-testinit run < request.json");
        std::process::exit(64);
    }
    let req: Request = serde_json::from_reader(std::io::stdin()).expect("request JSON");
    let mut spec = WorkerSpec::new(req.argv);
    spec.env = req.env;
    spec.timeout = Duration::from_millis(if req.timeout_ms == 0 { 30_000 } else { req.timeout_ms });
    if req.stdout_limit > 0 {
        spec.stdout_limit = req.stdout_limit;
    }
    if req.file_size > 0 {
        spec.limits.file_size = req.file_size;
    }
    for (virtual_path, host) in req.inputs {
        spec.inputs.push(StagedInput { virtual_path, file: File::open(host).expect("open input"), held: false });
    }
    if let Some((virtual_path, host, max_bytes)) = req.output {
        let file = OpenOptions::new().read(true).write(true).open(host).expect("open output");
        spec.output = Some(StagedOutput { virtual_path, file, max_bytes });
    }
    let tier = NativeTier::new(std::fs::read_link("/proc/self/exe").expect("/proc/self/exe"));
    let result = tier.start(spec).and_then(|w| w.wait());
    let json = match result {
        Ok(outcome) => serde_json::json!({ "outcome": outcome }),
        Err(e) => serde_json::json!({ "error": e.to_string(), "code": e.kind().as_str() }),
    };
    println!("{json}");
}

/// Run as the bound program inside a worker: reports what it could do to
/// itself and beside itself, one fact a line.
fn probe_program() -> ! {
    let me = airlock_sandbox::PROGRAM_PATH;
    let write = OpenOptions::new().write(true).open(me).map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string());
    let list = std::fs::read_dir("/.airlock").map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string());
    let beside = File::create("/.airlock/other").map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string());
    println!("ran as {me}\nwrite-self: {write}\nlist-dir: {list}\ncreate-beside: {beside}");
    std::process::exit(0)
}

/// A caller that keeps a warm pool and runs `sh -c 'sleep 100' MARKER` in
/// one of its sandboxes, prints the pool's claimed count, and then waits to
/// be killed (the tests SIGKILL it and look for survivors).
fn warm_hold(marker: &str) -> ! {
    let me = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
    let pool = std::sync::Arc::new(
        airlock_sandbox::WarmPool::start(me.clone(), airlock_sandbox::ImageMount::default_image(), 2).expect("pool"),
    );
    let t = std::time::Instant::now();
    while pool.stats().ready < 2 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut tier = NativeTier::new(me);
    tier.warm_pool(std::sync::Arc::clone(&pool));
    let mut spec = WorkerSpec::new(["sh", "-c", "sleep 100", marker]);
    spec.timeout = Duration::from_secs(100);
    let worker = tier.start(spec).expect("start");
    println!("{}", pool.stats().claimed);
    std::thread::sleep(Duration::from_secs(300));
    drop(worker);
    std::process::exit(0)
}
