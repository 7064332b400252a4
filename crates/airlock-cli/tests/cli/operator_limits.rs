//! Operator limits above the seed defaults (issue 17): `[limits]` raises or
//! lowers each limit within its hard cap, a manifest asks for at most what
//! the operator allows, inputs have their own bound (`max_input_file_bytes`)
//! apart from the output's (`max_file_bytes`), and a 1 GiB file goes through
//! snapshot, worker and publication with the `airlock` process's peak RSS
//! bounded.

use crate::util::{Project, Run, AIRLOCK, COPY_TOOL};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn project(limits: &str) -> Project {
    Project::with_config(&format!(
        "state_dir = \".airlock\"\n[filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n{limits}"
    ))
}

/// The copy tool with `extra` appended to its `[filesystem]`.
fn copy_tool(p: &Project, extra: &str) {
    p.write("tools/copy.clad.toml", format!("{COPY_TOOL}{extra}\n"));
}

/// A file of `bytes` bytes of varied, non-zero content.
fn write_sized(p: &Project, rel: &str, bytes: u64) {
    let block: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8 + 1).collect();
    let mut f = std::fs::File::create(p.path(rel)).unwrap();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(MIB) as usize;
        f.write_all(&block[..n]).unwrap();
        left -= n as u64;
    }
}

fn message(run: &Run) -> &str {
    run.envelope["error"]["message"].as_str().unwrap_or("")
}

#[test]
fn a_config_past_a_hard_cap_is_refused_and_one_at_the_cap_is_taken() {
    for (key, cap) in [
        ("max_file_bytes", 4 * GIB),
        ("max_input_file_bytes", 4 * GIB),
        ("max_input_bytes", 16 * GIB),
        ("max_inputs", 32),
    ] {
        let at = project(&format!("[limits]\n{key} = {cap}\n"));
        at.run(&["tools", "list"]).assert_ok();
        let past = project(&format!("[limits]\n{key} = {}\n", cap + 1));
        let run = past.run(&["tools", "list"]);
        assert_eq!((run.status(), run.reason(), run.code), ("error", "config.invalid", 78), "{key}: {run:#?}");
        assert!(
            message(&run).contains(&format!("[limits] {key}")) && message(&run).contains(&cap.to_string()),
            "{run:#?}"
        );
        let zero = project(&format!("[limits]\n{key} = 0\n"));
        assert_eq!(zero.run(&["tools", "list"]).reason(), "config.invalid", "{key} = 0");
    }
    for (key, cap) in
        [("calls", 1_000_000u64), ("read_bytes", 16 * GIB), ("write_bytes", 16 * GIB), ("entries", 1_000_000)]
    {
        project(&format!("[broker]\n{key} = {cap}\n")).run(&["tools", "list"]).assert_ok();
        let run = project(&format!("[broker]\n{key} = {}\n", cap + 1)).run(&["tools", "list"]);
        assert_eq!((run.reason(), run.code), ("config.invalid", 78), "{key}: {run:#?}");
    }
}

#[test]
fn a_manifest_asking_more_than_the_operator_allows_is_refused_naming_both_numbers_and_the_key() {
    for (key, code) in [("max_file_bytes", "limit.file_bytes"), ("max_input_file_bytes", "limit.input_file_bytes")] {
        let want = 16 * MIB + 1;
        let p = project("");
        copy_tool(&p, &format!("{key} = {want}"));
        p.write("data/in.txt", "x");
        let run = p.prepare("data/in.txt", "results/o.txt");
        run.assert_refused(code, 65);
        for part in [want.to_string(), (16 * MIB).to_string(), format!("[limits] {key}")] {
            assert!(message(&run).contains(&part), "{part} missing: {run:#?}");
        }
        // The operator raises the limit: the same manifest is taken, at the bound.
        let raised = project(&format!("[limits]\n{key} = {want}\n"));
        copy_tool(&raised, &format!("{key} = {want}"));
        raised.write("data/in.txt", "x");
        raised.prepare("data/in.txt", "results/o.txt").assert_ok();
        // One byte more than the raised limit is refused again.
        let over = project(&format!("[limits]\n{key} = {}\n", want - 1));
        copy_tool(&over, &format!("{key} = {want}"));
        over.write("data/in.txt", "x");
        over.prepare("data/in.txt", "results/o.txt").assert_refused(code, 65);
    }
}

#[test]
fn an_input_over_max_input_file_bytes_is_refused_before_reading() {
    let p = project("");
    copy_tool(&p, "max_input_file_bytes = 16");
    p.write("data/at.txt", "0123456789abcdef");
    p.write("data/past.txt", "0123456789abcdefX");
    p.prepare("data/at.txt", "results/a.txt").assert_ok();
    let run = p.prepare("data/past.txt", "results/b.txt");
    run.assert_refused("input.too_large", 77);
    assert!(message(&run).contains("max_input_file_bytes = 16"), "{run:#?}");
    // The operator's own input limit holds when the manifest says nothing.
    let op = project("[limits]\nmax_input_file_bytes = 16\n");
    op.write("data/at.txt", "0123456789abcdef");
    op.write("data/past.txt", "0123456789abcdefX");
    op.prepare("data/at.txt", "results/a.txt").assert_ok();
    op.prepare("data/past.txt", "results/b.txt").assert_refused("input.too_large", 77);
}

/// Regression (issue 17): a 40 MB log was refused as "more than
/// max_file_bytes = 1048576" by a word-count tool, whose 1 MiB is the bound
/// of its output. Inputs are bounded by the operator's input limit.
#[test]
fn an_input_larger_than_the_output_bound_is_accepted() {
    let p = project(&format!("[limits]\nmax_input_file_bytes = {}\nmax_input_bytes = {}\n", 48 * MIB, 48 * MIB));
    p.write(
        "tools/wc.clad.toml",
        r#"
[tool]
name = "wc"
version = "1.0.0"
description = "count the bytes of a log"
[args.input]
position = 1
required = true
type = "path"
[args.output]
position = 2
required = true
type = "path"
[command]
exec = ["sh", "-c", "wc -c < \"$1\" > \"$2\"", "sh", "{input}", "{output}"]
[output]
format = "text"
[filesystem]
read = ["{input}"]
create = ["{output}"]
max_file_bytes = 1048576
"#,
    );
    let size = 40_000_000;
    write_sized(&p, "data/app.log", size);
    let run = p.run(&["run", "wc", "data/app.log", "results/count.txt"]);
    run.assert_ok();
    assert_eq!(std::fs::read_to_string(p.path("results/count.txt")).unwrap().trim(), size.to_string());
    // Past the operator's input limit the same call is refused.
    write_sized(&p, "data/big.log", 48 * MIB + 1);
    p.run(&["run", "wc", "data/big.log", "results/big.txt"]).assert_refused("input.too_large", 77);
    assert!(!p.path("results/big.txt").exists());
}

#[test]
fn input_bytes_of_a_call_are_bounded_by_the_operator_and_may_be_raised() {
    let two = r#"
[tool]
name = "two"
version = "1"
description = "reads two files"
[command]
exec = ["cat", "data/a", "data/b"]
[filesystem]
read = ["data/a", "data/b"]
"#;
    let limits = format!("[limits]\nmax_input_file_bytes = {}\n", 20 * MIB);
    let p = project(&limits);
    p.write("tools/two.clad.toml", two);
    write_sized(&p, "data/a", 20 * MIB);
    write_sized(&p, "data/b", 12 * MIB + 1);
    // 32 MiB + 1 byte: one past the default.
    let run = p.run(&["prepare", "two"]);
    run.assert_refused("limit.input_bytes", 77);
    assert!(message(&run).contains("[limits] max_input_bytes") && message(&run).contains(&(32 * MIB).to_string()));
    let raised = project(&format!("{limits}max_input_bytes = {}\n", 32 * MIB + 1));
    raised.write("tools/two.clad.toml", two);
    write_sized(&raised, "data/a", 20 * MIB);
    write_sized(&raised, "data/b", 12 * MIB + 1);
    raised.run(&["prepare", "two"]).assert_ok();
}

/// `sha256sum FILE`'s digest.
fn sha256sum(path: &std::path::Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().expect("sha256sum (coreutils)");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

/// Runs the shipping binary under a small Python parent that reaps it with
/// `wait4` and reports its peak RSS (KiB; the largest of airlock and the
/// descendants it reaped, which here are the sandbox's init and a `cp`).
pub(crate) fn run_measured(p: &Project, args: &[&str], limit: Duration) -> (Run, u64) {
    const WRAPPER: &str = "import os, subprocess, sys\n\
        child = subprocess.Popen(sys.argv[1:])\n\
        _, status, usage = os.wait4(child.pid, 0)\n\
        sys.stderr.write('\\nMAXRSS_KIB=%d\\n' % usage.ru_maxrss)\n\
        sys.exit(os.waitstatus_to_exitcode(status))\n";
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(WRAPPER).arg(AIRLOCK).args(args).current_dir(p.root()).env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    if let Ok(r) = std::env::var("AIRLOCK_RESOLVER") {
        cmd.env("AIRLOCK_RESOLVER", r);
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("airlock {args:?} took more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("MAXRSS_KIB="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no MAXRSS line:\n{stderr}"));
    let envelope = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let run = Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout,
        stderr,
        envelope,
    };
    (run, rss)
}

/// A 1 GiB input (raised limits) is snapshotted, hashed, copied by a tool
/// and published, and `airlock` never holds more than 64 MiB resident:
/// every path streams.
#[test]
fn a_one_gib_file_goes_through_with_bounded_memory() {
    let p = project(&format!(
        "[limits]\nmax_input_file_bytes = {GIB}\nmax_input_bytes = {GIB}\nmax_file_bytes = {GIB}\n[staging]\nmax_bytes = {}\n",
        3 * GIB
    ));
    copy_tool(&p, &format!("max_file_bytes = {GIB}"));
    write_sized(&p, "data/big.bin", GIB);
    let want = sha256sum(&p.path("data/big.bin"));
    let (run, rss_kib) =
        run_measured(&p, &["run", "copy", "data/big.bin", "results/big.bin"], Duration::from_secs(120));
    run.assert_ok();
    let published = p.path("results/big.bin");
    assert_eq!(std::fs::metadata(&published).unwrap().len(), GIB);
    assert_eq!(sha256sum(&published), want);
    let created = &run.envelope["created_files"][0];
    assert_eq!(created["sha256"], format!("sha256:{want}"), "{run:#?}");
    assert_eq!(created["bytes"], GIB);
    assert!(rss_kib < 64 * 1024, "peak RSS of airlock was {rss_kib} KiB, not under 64 MiB");
    crate::runkit::assert_staging_empty(&p);
    std::fs::remove_file(&published).unwrap();
    std::fs::remove_file(p.path("data/big.bin")).unwrap();
}
