//! The same sandbox started by an unprivileged caller: the test helper
//! binary runs as uid/gid 65534 under `setpriv` and is its own init.
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::util::*;

/// Runs `request` through the helper as uid/gid 65534; `None` (with the
/// reason printed) when that cannot be done here.
fn run_unprivileged(request: &Value) -> Option<Value> {
    if !is_root() {
        eprintln!("skipped: not root, cannot switch to an unprivileged uid");
        return None;
    }
    let Some(setpriv) = which("setpriv") else {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return None;
    };
    let mut child = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(init_program())
        .arg("run")
        .current_dir("/")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "helper failed: {}\n{}", out.status, text(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout))))
}

fn bytes(v: &Value) -> String {
    let b: Vec<u8> = v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u8).collect();
    text(&b)
}

#[test]
fn an_unprivileged_caller_gets_the_same_confinement() {
    let dir = Dir::new();
    dir.write("in.txt", b"unprivileged input");
    dir.write("secret.txt", b"SECRET");
    let out_path = dir.path("out.staging");
    std::fs::write(&out_path, b"").unwrap();
    std::fs::set_permissions(&out_path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = r#"
        id -u; cat /proc/self/uid_map
        grep CapEff /proc/self/status
        cat data/in.txt > results/out.txt
        cat data/secret.txt && echo READ-SECRET
        echo x >> data/in.txt && echo WROTE-INPUT
        python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)' 2>/dev/null && echo UNSHARED
        true
    "#;
    let request = json!({
        "argv": ["sh", "-c", script],
        "inputs": [["data/in.txt", dir.path("in.txt")]],
        "output": ["results/out.txt", out_path, 1000],
    });
    let Some(result) = run_unprivileged(&request) else {
        return;
    };
    let o = result.get("outcome").unwrap_or_else(|| panic!("error: {result}"));
    let stdout = bytes(&o["stdout"]);
    let stderr = bytes(&o["stderr"]);
    let ctx = format!("{stdout}\n---\n{stderr}\n---\n{o}");
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("65534"), "{ctx}");
    // Inside 65534 is outside 65534: the caller's own uid, nothing else mapped.
    let map: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(map, ["65534", "65534", "1"], "{ctx}");
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{ctx}");
    for bad in ["READ-SECRET", "SECRET\n", "WROTE-INPUT", "UNSHARED"] {
        assert!(!stdout.contains(bad), "{bad}: {ctx}");
    }
    assert_eq!(o["exit"], json!({"Exited": 0}), "{ctx}");
    assert_eq!(o["cleanup_confirmed"], json!(true), "{ctx}");
    assert_eq!(o["output"]["bytes"], json!(18), "{ctx}");
    assert_eq!(std::fs::read(&out_path).unwrap(), b"unprivileged input");
    assert_eq!(dir.read("in.txt"), b"unprivileged input");
}

#[test]
fn an_unprivileged_timeout_cleans_up() {
    let m = marker("unpriv-timeout");
    let request = json!({
        "argv": ["sh", "-c", "sh -c 'sleep 100' \"$1\" & sleep 100", "sh", m],
        "timeout_ms": 1000,
    });
    let Some(result) = run_unprivileged(&request) else {
        return;
    };
    let o = result.get("outcome").unwrap_or_else(|| panic!("error: {result}"));
    assert_eq!(o["timed_out"], json!(true), "{o}");
    assert_eq!(o["cleanup_confirmed"], json!(true), "{o}");
    assert!(processes_with(&m).is_empty(), "survivors: {:?}", processes_with(&m));
}

/// Every other test of this binary, run again in-process by uid/gid 65534.
#[test]
fn the_whole_suite_passes_for_an_unprivileged_caller() {
    if std::env::var_os("AIRLOCK_SANDBOX_NESTED").is_some() {
        return; // we are the nested run
    }
    if !is_root() {
        eprintln!("skipped: not root, cannot switch to an unprivileged uid");
        return;
    }
    let Some(setpriv) = which("setpriv") else {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new(&setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args(args)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("AIRLOCK_SANDBOX_NESTED", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    if !as_nobody(&["--list"]).status.success() {
        eprintln!("skipped: uid 65534 cannot execute {} (check the target directory's permissions)", exe.display());
        return;
    }
    let out = as_nobody(&["--skip", "unprivileged::", "--test-threads=2"]);
    assert!(out.status.success(), "unprivileged run failed:\n{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("test result: ok."), "{}", text(&out.stdout));
}
