//! Shared helpers: a temp directory any user can read, the tier under test,
//! a runner that prints everything on failure, and a process scan.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use std::sync::{Arc, OnceLock};

use airlock_sandbox::{
    ImageMount, NativeTier, StagedInput, StagedOutput, Tier, WarmPool, Worker, WorkerOutcome, WorkerSpec,
};

/// The test init binary.
pub fn init_program() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_airlock-sandbox-testinit"))
}

/// The tier under test. With `AIRLOCK_TEST_WARM=1` it starts its calls in
/// warm sandboxes from one pool for the whole test process (a call that
/// does not fit one, or finds none ready, starts cold), so the whole suite
/// runs again on warm sandboxes.
pub fn tier() -> NativeTier {
    let mut tier = NativeTier::new(init_program());
    if let Some(pool) = suite_pool() {
        tier.warm_pool(pool);
    }
    tier
}

/// The suite's warm pool, when `AIRLOCK_TEST_WARM=1`.
pub fn suite_pool() -> Option<Arc<WarmPool>> {
    static POOL: OnceLock<Option<Arc<WarmPool>>> = OnceLock::new();
    POOL.get_or_init(|| {
        (std::env::var_os("AIRLOCK_TEST_WARM").as_deref() == Some(std::ffi::OsStr::new("1"))).then(|| {
            Arc::new(WarmPool::start(init_program(), ImageMount::default_image(), 4).expect("start the warm pool"))
        })
    })
    .clone()
}

/// A pool of `size` of this suite's own, once `size` skeletons are ready.
pub fn ready_pool(size: usize) -> Arc<WarmPool> {
    let pool = Arc::new(WarmPool::start(init_program(), ImageMount::default_image(), size).unwrap());
    let t = std::time::Instant::now();
    while pool.stats().ready < size {
        assert!(t.elapsed() < Duration::from_secs(20), "the pool never filled: {:?}", pool.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    pool
}

/// A temporary directory with mode 0755 (so an unprivileged helper can use it).
pub struct Dir {
    pub tmp: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Dir {
        let tmp = tempfile::Builder::new().prefix("airlock-sandbox-test-").tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Dir { tmp }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }

    /// An input staged from a file in this directory.
    pub fn input(&self, name: &str, virtual_path: &str) -> StagedInput {
        StagedInput { virtual_path: virtual_path.into(), file: File::open(self.path(name)).unwrap(), held: false }
    }

    /// An empty output staging file in this directory.
    pub fn output(&self, name: &str, virtual_path: &str, max_bytes: u64) -> StagedOutput {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(self.path(name)).unwrap();
        StagedOutput { virtual_path: virtual_path.into(), file, max_bytes }
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

/// `sh -c SCRIPT sh ARGS...`
pub fn sh(script: &str, args: &[&str]) -> WorkerSpec {
    let mut argv = vec!["sh".to_string(), "-c".to_string(), script.to_string(), "sh".to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut spec = WorkerSpec::new(argv);
    spec.timeout = Duration::from_secs(30);
    spec
}

/// Runs a spec; on an error prints it and panics.
pub fn run(spec: WorkerSpec) -> WorkerOutcome {
    let argv = spec.argv.clone();
    match tier().start(spec).and_then(|w| w.wait()) {
        Ok(o) => o,
        Err(e) => panic!("{argv:?} failed to run: {e} ({})", e.kind()),
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Prints an outcome for a failing assertion's context.
pub fn show(o: &WorkerOutcome) -> String {
    format!(
        "exit={:?} timed_out={} cleanup={} output={:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.exit,
        o.timed_out,
        o.cleanup_confirmed,
        o.output,
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// The tool ended well but wrote more than its output's bound: nothing is
/// exported, the reason is `limit.output_size`, and the staging file
/// (`out.staging` in `dir`) holds nothing.
#[track_caller]
pub fn assert_over_bound(o: &WorkerOutcome, dir: &Dir) {
    assert!(o.exit.success(), "{}", show(o));
    let export = o.output.clone().unwrap();
    assert!(export.over_limit && export.bytes == 0, "{export:?}");
    assert_eq!(o.reason_code(), Some("limit.output_size"));
    assert!(dir.read("out.staging").is_empty());
}

/// A marker unique to this test process and call.
pub fn marker(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("airlock-marker-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// Pids of live (non-zombie) processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next().unwrap_or('?')).unwrap_or('?');
            if state != 'Z' && state != 'X' {
                found.push(pid);
            }
        }
    }
    found
}

pub fn is_root() -> bool {
    rustix_free_geteuid() == 0
}

fn rustix_free_geteuid() -> u32 {
    // From /proc to keep the tests free of unsafe and extra dependencies.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
    uid.split_whitespace().nth(1).unwrap().parse().unwrap()
}

pub fn which(program: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"].iter().map(|d| Path::new(d).join(program)).find(|p| p.exists())
}

/// The paths the worker's `/proc` must mask (ATTACKS case 27): the OCI
/// runtime spec's default masked paths and the host details of issue 15.
/// Written out here, not taken from the crate, so a path dropped from the
/// crate's table fails the tests.
pub const MASKED_PROC: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/interrupts",
    "/proc/cmdline",
    "/proc/config.gz",
    "/proc/kallsyms",
    "/proc/modules",
    "/proc/sys/kernel/random/boot_id",
    "/proc/meminfo",
    "/proc/kmsg",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
    "/proc/zoneinfo",
    "/proc/buddyinfo",
    "/proc/pagetypeinfo",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/kpagecgroup",
    "/proc/swaps",
    "/proc/diskstats",
    "/proc/partitions",
];

/// The OCI runtime spec's default read-only paths.
pub const READONLY_PROC: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// Those of `paths` this kernel has (the worker's `/proc` is a fresh
/// instance of the same kernel's, so it has the same entries).
pub fn present(paths: &[&str]) -> Vec<String> {
    paths.iter().filter(|p| Path::new(p).symlink_metadata().is_ok()).map(|p| p.to_string()).collect()
}
