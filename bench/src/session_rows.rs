//! Issue 21 row: one interaction (`1+1`) with a python3 REPL held in an
//! airlock session (`airlock session send`: the CLI, the holder's socket,
//! the pattern check, a Cedar request, the journal record, the terminal)
//! beside the same REPL driven directly over a pseudo-terminal by this
//! process. Target: at most 2× the bare interaction plus 1 ms. The CLI
//! row pays a process start per interaction; the MCP row (`session_send`
//! to a running `airlock mcp` over stdio) is the governed interaction
//! without it.

use crate::harness::{compare, Report, Summary, Target};
use crate::run_rows::{check, setup_with};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

const TOOL: &str = r#"
[tool]
name = "calc"
version = "1"
description = "python3 as a calculator"
mode = "session"
[args.input]
position = 1
required = true
type = "path"
[session]
startup_command = "python3 -q -i {input}"
ready_pattern = '^>>> $'
[session.commands.calc]
pattern = '[0-9+*() ]{1,100}'
[filesystem]
read = ["{input}"]
"#;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A python3 REPL on a pseudo-terminal this process holds (the master).
struct BareRepl {
    master: std::fs::File,
    child: std::process::Child,
}

impl BareRepl {
    fn start() -> Result<BareRepl, String> {
        use rustix::pty::OpenptFlags;
        let master =
            rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).map_err(err)?;
        rustix::pty::grantpt(&master).map_err(err)?;
        rustix::pty::unlockpt(&master).map_err(err)?;
        let name = rustix::pty::ptsname(&master, Vec::new()).map_err(err)?;
        let slave =
            std::fs::OpenOptions::new().read(true).write(true).open(name.to_string_lossy().as_ref()).map_err(err)?;
        let child = Command::new("python3")
            .args(["-q", "-i"])
            .env("TERM", "dumb")
            .stdin(Stdio::from(slave.try_clone().map_err(err)?))
            .stdout(Stdio::from(slave.try_clone().map_err(err)?))
            .stderr(Stdio::from(slave))
            .spawn()
            .map_err(err)?;
        let mut repl = BareRepl { master: std::fs::File::from(master), child };
        repl.until_prompt()?;
        Ok(repl)
    }

    fn until_prompt(&mut self) -> Result<String, String> {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.ends_with(b">>> ") {
            let n = self.master.read(&mut buf).map_err(err)?;
            if n == 0 {
                return Err("the bare REPL ended".into());
            }
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(String::from_utf8_lossy(&seen).into_owned())
    }

    fn interact(&mut self) -> Result<(), String> {
        self.master.write_all(b"1+1\n").map_err(err)?;
        let out = self.until_prompt()?;
        if out.contains('2') {
            Ok(())
        } else {
            Err(format!("the bare REPL answered {out:?}"))
        }
    }
}

impl Drop for BareRepl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `airlock session send ID calc 1+1` vs `1+1` over a bare pty.
pub fn interaction_vs_bare_pty(quick: bool) -> Result<Report, String> {
    let setup = setup_with("")?;
    std::fs::write(setup.root.join("tools/calc.clad.toml"), TOOL).map_err(err)?;
    let airlock = |args: &[&str], what: &str| {
        check(Command::new(&setup.airlock).args(args).current_dir(&setup.root).output(), what)
    };
    airlock(&["session", "start", "--invocation-id", "bench-calc", "calc", "data/in.txt"], "airlock session start")?;
    let mut bare = BareRepl::start()?;
    let samples = if quick { 10 } else { 50 };
    let result = compare(
        samples,
        || airlock(&["session", "send", "bench-calc", "calc", "1+1"], "airlock session send"),
        || bare.interact(),
    );
    let _ = Command::new(&setup.airlock).args(["session", "close", "bench-calc"]).current_dir(&setup.root).output();
    let (candidate, baseline) = result?;
    Ok(report("session: one python3 interaction vs the REPL over a bare pty", candidate, baseline, samples))
}

/// A session row's report: target at most 2× the bare interaction plus 1 ms.
fn report(name: &'static str, candidate: Summary, baseline: Summary, samples: usize) -> Report {
    let target = (2.0 + 0.001 / baseline.p50.as_secs_f64().max(1e-9)).max(2.0);
    Report {
        name,
        candidate,
        baseline,
        target: Target::TimeRatioAtMost(target),
        bytes: None,
        samples,
        extra: Vec::new(),
    }
}

/// The same program as a one-shot tool, for the start-up comparison.
const ONE_SHOT: &str = r#"
[tool]
name = "calc_once"
version = "1"
description = "python3 computing 1+1 once"
[args.input]
position = 1
required = true
type = "path"
[command]
exec = ["python3", "-q", "-c", "print(1+1)", "{input}"]
[filesystem]
read = ["{input}"]
"#;

/// p50 of `samples` runs of `f`, in milliseconds.
fn p50_ms(samples: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = std::time::Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    Ok(crate::harness::summarize(times).p50.as_secs_f64() * 1e3)
}

/// `session_start calc data/in.txt` over MCP: the session's id.
fn start_calc(mcp: &mut crate::mcp_rows::Session) -> Result<String, String> {
    let started = mcp.request(
        "tools/call",
        serde_json::json!({ "name": "session_start", "arguments": { "tool": "calc", "arguments": { "input": "data/in.txt" } } }),
    )?;
    started["result"]["structuredContent"]["content"]["session"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("session_start answered {started}"))
}

/// Session start and close over MCP vs a one-shot `tools/call` of the same
/// program on the same input (the issue's second reading; no target).
fn start_vs_one_shot(mcp: &mut crate::mcp_rows::Session, samples: usize) -> Result<String, String> {
    let start = p50_ms(samples, || {
        let id = start_calc(mcp)?;
        mcp.request("tools/call", serde_json::json!({ "name": "session_close", "arguments": { "session": id } }))
            .map(drop)
    })?;
    let once = p50_ms(samples, || {
        let ran = mcp.request(
            "tools/call",
            serde_json::json!({ "name": "calc_once", "arguments": { "input": "data/in.txt" } }),
        )?;
        match ran["result"]["structuredContent"]["status"].as_str() {
            Some("ok") => Ok(()),
            _ => Err(format!("calc_once answered {ran}")),
        }
    })?;
    Ok(format!(
        "session start + close over MCP p50 {start:.1} ms vs a one-shot tools/call of the same program {once:.1} ms"
    ))
}

/// `session_send calc 1+1` to a running `airlock mcp` vs `1+1` over a bare pty.
pub fn interaction_over_mcp_vs_bare_pty(quick: bool) -> Result<Report, String> {
    let setup = setup_with("")?;
    std::fs::write(setup.root.join("tools/calc.clad.toml"), TOOL).map_err(err)?;
    std::fs::write(setup.root.join("tools/calc_once.clad.toml"), ONE_SHOT).map_err(err)?;
    let mut mcp = crate::mcp_rows::Session::start(&setup)?;
    let extra = vec![start_vs_one_shot(&mut mcp, if quick { 3 } else { 10 })?];
    let id = start_calc(&mut mcp)?;
    let mut send = || -> Result<(), String> {
        let sent = mcp.request(
            "tools/call",
            serde_json::json!({ "name": "session_send", "arguments": { "session": id, "command": "calc", "arg": "1+1" } }),
        )?;
        match sent["result"]["structuredContent"]["content"]["output"].as_str() {
            Some(out) if out.contains('2') => Ok(()),
            _ => Err(format!("session_send answered {sent}")),
        }
    };
    let mut bare = BareRepl::start()?;
    let samples = if quick { 20 } else { 200 };
    let (candidate, baseline) = compare(samples, &mut send, || bare.interact())?;
    let name = "session over MCP: one python3 interaction vs the REPL over a bare pty";
    Ok(Report { extra, ..report(name, candidate, baseline, samples) })
}
