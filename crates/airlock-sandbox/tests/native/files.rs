//! The staged files: inputs in, the output out, and the limits on both
//! (ATTACKS.md cases 15, 17, 18).
use airlock_sandbox::WorkerSpec;

use crate::util::*;

fn with_files(mut spec: WorkerSpec, dir: &Dir, input: &[u8], max_bytes: u64) -> WorkerSpec {
    dir.write("in.txt", input);
    spec.inputs.push(dir.input("in.txt", "data/in.txt"));
    spec.output = Some(dir.output("out.staging", "results/out.txt", max_bytes));
    spec
}

#[test]
fn cat_of_the_input_is_exported() {
    let dir = Dir::new();
    let input: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let spec = with_files(sh("cat \"$1\" > \"$2\"", &["data/in.txt", "results/out.txt"]), &dir, &input, 1 << 20);
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    let export = o.output.clone().unwrap();
    assert!(export.exported(), "{export:?}");
    assert_eq!(export.bytes, input.len() as u64);
    assert_eq!(dir.read("out.staging"), input);
    assert!(o.cleanup_confirmed);
    assert_eq!(o.reason_code(), None);
}

#[test]
fn the_input_cannot_be_changed_and_the_host_copy_is_untouched() {
    let dir = Dir::new();
    let script = r#"
        echo x >> data/in.txt && echo APPENDED
        true > data/in.txt && echo TRUNCATED
        rm -f data/in.txt && echo REMOVED
        chmod 666 data/in.txt && echo CHMODDED
        mv data/in.txt data/moved && echo MOVED
        python3 -c 'import os; os.truncate("data/in.txt", 0)' 2>/dev/null && echo PYTRUNC
        cat data/in.txt
    "#;
    let spec = with_files(sh(script, &[]), &dir, b"original", 100);
    let o = run(spec);
    let out = text(&o.stdout);
    for bad in ["APPENDED", "TRUNCATED", "REMOVED", "CHMODDED", "MOVED", "PYTRUNC"] {
        assert!(!out.contains(bad), "{bad}:\n{}", show(&o));
    }
    assert!(out.ends_with("original"), "{}", show(&o));
    assert_eq!(dir.read("in.txt"), b"original");
}

#[test]
fn the_output_cannot_be_deleted_or_replaced() {
    let dir = Dir::new();
    let script = r#"
        echo good > results/out.txt
        rm -f results/out.txt && echo REMOVED
        ln -sf /etc/passwd results/out.txt && echo SYMLINKED
        echo evil > /tmp/evil; mv /tmp/evil results/out.txt && echo REPLACED
        ln /tmp/evil results/hard && echo HARDLINKED
        mkdir results/sub && echo MKDIR
        echo evil > results/other && echo CREATED
        true
    "#;
    let spec = with_files(sh(script, &[]), &dir, b"", 100);
    let o = run(spec);
    let out = text(&o.stdout);
    for bad in ["REMOVED", "SYMLINKED", "REPLACED", "HARDLINKED", "MKDIR", "CREATED"] {
        assert!(!out.contains(bad), "{bad}:\n{}", show(&o));
    }
    // The inode the sandbox created is intact, so its bytes are exported.
    let export = o.output.clone().unwrap();
    assert!(export.exported(), "{}", show(&o));
    assert_eq!(dir.read("out.staging"), b"good\n");
}

fn over_limit_case(script: &str) -> (airlock_sandbox::WorkerOutcome, Vec<u8>) {
    let dir = Dir::new();
    let mut spec = with_files(sh(script, &[]), &dir, b"", 1000);
    spec.limits.file_size = 1000;
    let o = run(spec);
    let host = dir.read("out.staging");
    (o, host)
}

#[test]
fn writing_past_the_file_size_limit_fails() {
    let (o, host) = over_limit_case("head -c 5000 /dev/zero > results/out.txt");
    // head is killed by SIGXFSZ (or sees EFBIG): the tool failed.
    assert!(!o.exit.success(), "{}", show(&o));
    assert!(o.reason_code().is_some());
    let export = o.output.unwrap();
    assert!(export.bytes <= 1000 && host.len() <= 1000, "{export:?}");
}

#[test]
fn truncating_past_the_file_size_limit_fails() {
    let (o, host) = over_limit_case("truncate -s 5000 results/out.txt");
    assert!(!o.exit.success(), "{}", show(&o));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("File too large")
            || stderr.contains("File size limit exceeded")
            || matches!(o.exit, airlock_sandbox::ExitStatusKind::Signaled(25)),
        "{}",
        show(&o)
    );
    assert!(host.len() <= 1000);
}

#[test]
fn fallocating_past_the_file_size_limit_fails() {
    if which("fallocate").is_none() {
        eprintln!("skipped: no fallocate(1) on this host");
        return;
    }
    let (o, host) = over_limit_case("fallocate -l 5000 results/out.txt");
    assert!(!o.exit.success(), "{}", show(&o));
    assert!(host.len() <= 1000);
}

#[test]
fn an_output_over_max_bytes_is_not_exported() {
    let dir = Dir::new();
    let mut spec = with_files(sh("head -c 5000 /dev/zero > results/out.txt", &[]), &dir, b"", 1000);
    spec.limits.file_size = 100_000;
    assert_over_bound(&run(spec), &dir);
}

#[test]
fn a_detached_child_does_not_write_late() {
    let dir = Dir::new();
    let m = marker("late");
    let script = r#"
        echo early > results/out.txt
        setsid sh -c 'sleep 1; echo late >> /workspace/results/out.txt' "$1" </dev/null >/dev/null 2>&1 &
        nohup sh -c 'sleep 1; echo late2 >> /workspace/results/out.txt' "$1" </dev/null >/dev/null 2>&1 &
        (trap '' HUP TERM; exec sh -c 'sleep 30' "$1") &
        exit 0
    "#;
    let spec = with_files(sh(script, &[&m]), &dir, b"", 1000);
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(o.cleanup_confirmed, "{}", show(&o));
    assert_eq!(dir.read("out.staging"), b"early\n");
    assert!(processes_with(&m).is_empty(), "sandbox processes survive: {:?}", processes_with(&m));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(dir.read("out.staging"), b"early\n", "something wrote late");
    assert!(processes_with(&m).is_empty());
}
