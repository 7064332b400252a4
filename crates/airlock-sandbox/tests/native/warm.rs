//! Warm sandboxes: calls started in pre-built skeletons get the same files,
//! confinement and outcome as cold ones; a skeleton serves one call only;
//! a caller's death (SIGKILL) takes its skeletons and their calls with it.

use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_sandbox::{ImageMount, Tier, Worker};

use crate::util::{init_program, marker, processes_with, ready_pool, run, sh, show, text, tier, Dir};

fn warm_tier(pool: &Arc<airlock_sandbox::WarmPool>) -> airlock_sandbox::NativeTier {
    let mut t = tier();
    t.warm_pool(Arc::clone(pool));
    t
}

#[test]
fn a_warm_call_reads_its_input_and_writes_its_output() {
    let pool = ready_pool(1);
    let dir = Dir::new();
    dir.write("in.txt", b"one two three\n");
    let mut spec = sh("wc -w < in.txt > out.txt; id -u; cat /proc/self/status | grep -E '^(NoNewPrivs|CapEff)'", &[]);
    spec.inputs.push(dir.input("in.txt", "in.txt"));
    spec.output = Some(dir.output("out.staging", "out.txt", 1024));
    let o = warm_tier(&pool).start(spec).unwrap().wait().unwrap();
    assert_eq!(pool.stats().claimed, 1, "the call did not start warm");
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(text(&dir.read("out.staging")).trim(), "3");
    let out = text(&o.stdout);
    assert!(out.starts_with("65534\n"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1") && out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(o.cleanup_confirmed, "{}", show(&o));
}

#[test]
fn a_skeleton_serves_one_call_and_leaves_nothing_to_the_next() {
    let pool = ready_pool(2);
    let t = warm_tier(&pool);
    let first = marker("warm-first");
    // The first call leaves a file in /tmp, a process behind and reports its namespaces.
    let script = "echo x > /tmp/left; (sleep 100 &) ; readlink /proc/self/ns/pid /proc/self/ns/mnt; ls /tmp";
    let a = t.start(sh(script, &[&first])).unwrap().wait().unwrap();
    let b = t.start(sh(script, &[&first])).unwrap().wait().unwrap();
    assert_eq!(pool.stats().claimed, 2, "the calls did not start warm");
    assert!(a.exit.success() && b.exit.success(), "{}\n{}", show(&a), show(&b));
    let (a, b) = (text(&a.stdout), text(&b.stdout));
    let ns = |s: &str| s.lines().take(2).map(str::to_owned).collect::<Vec<_>>();
    assert_ne!(ns(&a)[0], ns(&b)[0], "two calls shared a pid namespace");
    assert_ne!(ns(&a)[1], ns(&b)[1], "two calls shared a mount namespace");
    // Each saw only its own /tmp file.
    assert_eq!(a.lines().skip(2).collect::<Vec<_>>(), ["left"], "{a}");
    assert_eq!(b.lines().skip(2).collect::<Vec<_>>(), ["left"], "{b}");
    assert!(processes_with(&first).is_empty(), "a call's process outlived it");
}

#[test]
fn a_call_that_does_not_fit_the_pool_starts_cold() {
    let pool = ready_pool(1);
    let mut spec = sh("echo cold", &[]);
    spec.image = vec![ImageMount::new("/usr"), ImageMount::new("/bin"), ImageMount::new("/lib")];
    if std::path::Path::new("/lib64").exists() {
        spec.image.push(ImageMount::new("/lib64"));
    }
    let o = warm_tier(&pool).start(spec).unwrap().wait().unwrap();
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(pool.stats().claimed, 0, "a call with another image used a skeleton");
    // The same call with the pool's image does use one.
    let o = warm_tier(&pool).start(sh("echo warm", &[])).unwrap().wait().unwrap();
    assert_eq!((text(&o.stdout).as_str(), pool.stats().claimed), ("warm\n", 1));
}

#[test]
fn a_warm_call_keeps_its_deadline_and_limits() {
    let pool = ready_pool(1);
    let mut spec = sh("sleep 30", &[]);
    spec.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let o = warm_tier(&pool).start(spec).unwrap().wait().unwrap();
    assert!(o.timed_out && o.cleanup_confirmed, "{}", show(&o));
    assert!(started.elapsed() < Duration::from_secs(10));
    let mut spec = sh("head -c 3000 /dev/zero > big 2>/dev/null; echo $?", &[]);
    spec.limits.file_size = 1000;
    let o = warm_tier(&pool).start(spec).unwrap().wait().unwrap();
    assert_ne!(text(&o.stdout).trim(), "0", "the file size limit did not hold: {}", show(&o));
    assert_eq!(pool.stats().claimed, 2);
}

#[test]
fn many_threads_share_one_pool() {
    let pool = ready_pool(2);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let t = warm_tier(&pool);
            std::thread::spawn(move || {
                let o = t.start(sh("echo $1", &[&i.to_string()])).unwrap().wait().unwrap();
                assert_eq!(text(&o.stdout), format!("{i}\n"), "{}", show(&o));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(pool.stats().claimed >= 1, "{:?}", pool.stats());
}

/// Pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(") ").and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            found.push(child);
        }
    }
    found
}

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
    matches!(state, Some(s) if s != 'Z' && s != 'X')
}

#[test]
fn a_caller_killed_takes_its_skeletons_and_its_warm_call_with_it() {
    let m = marker("warm-held");
    let mut helper = std::process::Command::new(init_program())
        .args(["warm-hold", &m])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(helper.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "1", "the held call did not start warm");
    let t = Instant::now();
    while processes_with(&m).is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!processes_with(&m).is_empty(), "the warm call never started");
    // Every init of the helper (the call's and the idle skeletons') and their PID 1s.
    let t = Instant::now();
    let mut sandboxes = children_of(helper.id());
    while sandboxes.len() < 2 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        sandboxes = children_of(helper.id());
    }
    assert!(sandboxes.len() >= 2, "expected the call's init and an idle skeleton: {sandboxes:?}");
    let pid1s: Vec<u32> = sandboxes.iter().flat_map(|p| children_of(*p)).collect();
    assert!(pid1s.len() >= 2, "PID 1s: {pid1s:?}");
    helper.kill().unwrap();
    helper.wait().unwrap();
    let t = Instant::now();
    let left = || sandboxes.iter().chain(&pid1s).copied().filter(|p| alive(*p)).collect::<Vec<_>>();
    while (!left().is_empty() || !processes_with(&m).is_empty()) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(left().is_empty(), "sandbox processes outlived their caller: {:?}", left());
    assert!(processes_with(&m).is_empty(), "the warm call outlived its caller: {:?}", processes_with(&m));
}

#[test]
fn a_claimed_skeleton_is_replaced() {
    let pool = ready_pool(1);
    let o = run_warm(&pool);
    assert!(o.exit.success());
    let t = Instant::now();
    while pool.stats().ready < 1 {
        assert!(t.elapsed() < Duration::from_secs(20), "no skeleton replaced the one used: {:?}", pool.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = run; // the cold runner stays the suite's
}

/// While a call is counted busy (from its start to its answer, after its
/// sandbox is gone) and another skeleton is ready, the used one is not
/// replaced; once the call is answered, it is.
#[test]
fn a_used_skeleton_is_replaced_after_its_call_is_answered() {
    let pool = ready_pool(2);
    let busy = pool.busy();
    let o = run_warm(&pool);
    assert!(o.exit.success());
    assert_eq!(pool.stats().claimed, 1, "the call did not start warm");
    // The worker is gone; the call (say, its publication) is not answered.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(pool.stats().ready, 1, "a skeleton was built while a call was in progress: {:?}", pool.stats());
    drop(busy);
    let t = Instant::now();
    while pool.stats().ready < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "no skeleton replaced the one used: {:?}", pool.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run_warm(pool: &Arc<airlock_sandbox::WarmPool>) -> airlock_sandbox::WorkerOutcome {
    warm_tier(pool).start(sh("true", &[])).unwrap().wait().unwrap()
}

/// `WarmPool::start_one` (`airlock run`): the call made right after the
/// pool started waits for its one skeleton instead of starting cold, and
/// the pool builds no other.
#[test]
fn a_one_shot_pool_serves_the_call_made_while_it_builds_and_never_refills() {
    let pool = Arc::new(airlock_sandbox::WarmPool::start_one(init_program(), ImageMount::default_image()).unwrap());
    let t = warm_tier(&pool);
    let o = t.start(sh("echo first", &[])).unwrap().wait().unwrap();
    assert_eq!((text(&o.stdout).as_str(), pool.stats().claimed), ("first\n", 1), "{}", show(&o));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pool.stats().ready, 0, "a one-shot pool refilled");
    // A second call starts cold.
    let o = t.start(sh("echo second", &[])).unwrap().wait().unwrap();
    assert_eq!((text(&o.stdout).as_str(), pool.stats().claimed), ("second\n", 1), "{}", show(&o));
}

/// A bound program (how the Git driver runs) in a warm sandbox: bound
/// through its call slot, read-only, alone, as cold (`program.rs`).
#[test]
fn a_bound_program_runs_warm_read_only_and_alone() {
    let pool = ready_pool(1);
    let mut t = warm_tier(&pool);
    t.bind_program(Arc::new(std::fs::File::open(init_program()).unwrap()));
    let mut spec = airlock_sandbox::WorkerSpec::new([airlock_sandbox::PROGRAM_PATH, "probe-program"]);
    spec.timeout = Duration::from_secs(30);
    let o = t.start(spec).unwrap().wait().unwrap();
    assert_eq!(pool.stats().claimed, 1, "the call did not start warm");
    assert!(o.exit.success(), "{}", show(&o));
    let out = text(&o.stdout);
    assert!(out.contains("ran as /.airlock/program"), "{out}");
    for line in ["write-self: ", "list-dir: ", "create-beside: "] {
        let value = out.lines().find_map(|l| l.strip_prefix(line)).unwrap_or("missing");
        assert_ne!(value, "ok", "{line} was allowed:\n{out}");
    }
    // The next call, with no program bound, finds nothing there.
    let o = warm_tier(&pool).start(sh("test -e /.airlock/program && echo present || echo absent", &[])).unwrap();
    assert_eq!(text(&o.wait().unwrap().stdout), "absent\n");
}
