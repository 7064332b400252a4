//! Memory and process-count limits through a delegated cgroup v2, where
//! the host offers one. Where it does not, nothing fails: the outcome says
//! which limits were applied and why the others were not.
//!
//! Each worker gets a cgroup of its own under `[sandbox] cgroup_parent` (or
//! under airlock's own cgroup) when that directory delegates `memory` and
//! `pids` and is writable; otherwise memory is bounded by `RLIMIT_AS` per
//! process and processes by `RLIMIT_NPROC`. Only a cgroup bounds the sum of
//! what no rlimit counts: a memfd is a file, so `write`, `ftruncate` and
//! `fallocate` stop at `RLIMIT_FSIZE` (`EFBIG`) and each memfd is bounded,
//! but their number only by `RLIMIT_NOFILE`; pipe and socket buffers are
//! bounded only by the kernel's per-pipe and per-user defaults.
//!
//! airlock does not create a delegation itself: `systemd-run --user` needs a
//! user manager, which hosts without systemd lack. The operator makes a
//! cgroup v2 directory with `+memory +pids` in its `cgroup.subtree_control`,
//! writable by airlock's user, and names it. An isolated submission's broker
//! and worker share one cgroup ([`SharedCgroup`]: the worker's memory limit,
//! its pids + 1); the broker is adopted right after it is spawned, the
//! worker's init before it forks.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A cgroup made for one worker; removed on [`WorkerCgroup::remove`].
#[derive(Debug)]
pub(crate) struct WorkerCgroup {
    pub dir: PathBuf,
    pub memory: bool,
    pub pids: bool,
}

/// The cgroup v2 mount point, from `/proc/self/mountinfo`.
///
/// Found once a process: every call asks twice where its worker's cgroup
/// would be (before its sandbox is started ahead and when the call takes
/// it), and reading the mount table was most of that. A process that finds
/// none asks again next time; one whose cgroup2 was unmounted since finds
/// no delegation there, as if it had asked.
fn cgroup2_mount() -> Result<PathBuf, String> {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(mount) = FOUND.get() {
        return Ok(mount.clone());
    }
    let info =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
    let mount = info
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if post.split(' ').next()? == "cgroup2" {
                Some(PathBuf::from(pre.split(' ').nth(4)?))
            } else {
                None
            }
        })
        .ok_or_else(|| "no cgroup2 file system is mounted".to_string())?;
    Ok(FOUND.get_or_init(|| mount).clone())
}

/// This process's cgroup v2 directory.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let mount = cgroup2_mount()?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("read /proc/self/cgroup: {e}"))?;
    let rel = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| "no cgroup v2 entry in /proc/self/cgroup".to_string())?;
    Ok(mount.join(rel.trim_start_matches('/')))
}

fn controllers(path: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(path.join(file))
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The directory under which worker cgroups can be made, and which of
/// `memory` and `pids` it delegates; an error says why none can be.
pub(crate) fn delegation(parent: Option<&Path>) -> Result<(PathBuf, bool, bool), String> {
    let dir = match parent {
        Some(p) => p.to_path_buf(),
        None => own_cgroup_dir()?,
    };
    let enabled = controllers(&dir, "cgroup.subtree_control");
    let (memory, pids) = (enabled.iter().any(|c| c == "memory"), enabled.iter().any(|c| c == "pids"));
    if !memory && !pids {
        let offered = controllers(&dir, "cgroup.controllers");
        return Err(format!(
            "cgroup {} does not delegate memory or pids to children (subtree_control: [{}], controllers: [{}])",
            dir.display(),
            enabled.join(" "),
            offered.join(" ")
        ));
    }
    let probe = std::fs::metadata(dir.join("cgroup.procs")).map_err(|e| format!("{}: {e}", dir.display()))?;
    if probe.permissions().readonly() {
        return Err(format!("{} is not writable", dir.display()));
    }
    Ok((dir, memory, pids))
}

/// What a delegated cgroup v2 directory offers workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupDelegation {
    /// The directory worker cgroups are made under.
    pub dir: PathBuf,
    /// `memory` is enabled for its children.
    pub memory: bool,
    /// `pids` is enabled for its children.
    pub pids: bool,
}

/// What the cgroup under which workers would be made (`parent`, or the
/// caller's own cgroup) delegates; `Err` says why it delegates nothing.
/// Changes nothing.
pub fn cgroup_delegation(parent: Option<&Path>) -> Result<CgroupDelegation, String> {
    delegation(parent).map(|(dir, memory, pids)| CgroupDelegation { dir, memory, pids })
}

/// Where a worker started now would get *both* real limits: `Ok` with the
/// delegated cgroup v2 directory (under `parent`, or the caller's own
/// cgroup) when it delegates `memory` and `pids` and is writable; otherwise
/// why not. Changes nothing.
pub fn cgroup_limits_available(parent: Option<&Path>) -> Result<PathBuf, String> {
    let (dir, memory, pids) = delegation(parent)?;
    match (memory, pids) {
        (true, true) => Ok(dir),
        (m, _) => Err(format!(
            "cgroup {} delegates {} but not {}",
            dir.display(),
            if m { "memory" } else { "pids" },
            if m { "pids" } else { "memory" }
        )),
    }
}

/// One cgroup v2 for several processes of one call, so their memory and
/// processes are bounded together: an isolated submission's broker is
/// adopted into it, and a [`NativeTier`](crate::NativeTier) given it with
/// [`in_cgroup`](crate::NativeTier::in_cgroup) puts its worker there instead
/// of making a cgroup of its own. Whatever is left in it is killed and the
/// cgroup removed when it is dropped (after the processes were waited for).
#[derive(Debug)]
pub struct SharedCgroup {
    cgroup: WorkerCgroup,
}

impl SharedCgroup {
    /// Makes the cgroup under `parent` (or the caller's own cgroup) with
    /// `memory.max` = `memory` and `pids.max` = `pids`; `Err` says why no
    /// cgroup can be had here.
    pub fn create(parent: Option<&Path>, memory: Option<u64>, pids: Option<u64>) -> Result<Self, String> {
        WorkerCgroup::create(parent, memory, pids).map(|cgroup| SharedCgroup { cgroup })
    }

    /// Moves process `pid` into the cgroup.
    pub fn adopt(&self, pid: u32) -> Result<(), String> {
        self.cgroup.adopt(pid)
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.cgroup.dir
    }

    /// Whether `memory.max` was written.
    pub fn memory(&self) -> bool {
        self.cgroup.memory
    }

    /// Whether `pids.max` was written.
    pub fn pids(&self) -> bool {
        self.cgroup.pids
    }
}

impl Drop for SharedCgroup {
    fn drop(&mut self) {
        self.cgroup.remove();
    }
}

/// Where a worker with `memory` and `pids` limits would get a cgroup of its
/// own under `parent` (the delegation's directory and controllers), or why
/// it would get none.
pub(crate) fn for_worker(
    parent: Option<&Path>,
    memory: Option<u64>,
    pids: Option<u64>,
) -> Result<(PathBuf, bool, bool), String> {
    if memory.is_none() && pids.is_none() {
        return Err("no memory or pids limit was requested".into());
    }
    delegation(parent)
}

impl WorkerCgroup {
    /// Makes `airlock-<random>` under the delegated parent and writes the
    /// limits. `Err` says why no cgroup limit applies.
    pub(crate) fn create(parent: Option<&Path>, memory: Option<u64>, pids: Option<u64>) -> Result<Self, String> {
        let (base, has_mem, has_pids) = for_worker(parent, memory, pids)?;
        let mut suffix = [0u8; 8];
        getrandom_fill(&mut suffix);
        let name = format!("airlock-{}", suffix.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let dir = base.join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let mut cg = WorkerCgroup { dir, memory: false, pids: false };
        let write = |file: &str, v: u64| std::fs::write(cg.dir.join(file), v.to_string());
        if let (Some(m), true) = (memory, has_mem) {
            if let Err(e) = write("memory.max", m) {
                cg.remove();
                return Err(format!("write memory.max: {e}"));
            }
            let _ = write("memory.swap.max", 0);
            cg.memory = true;
        }
        if let (Some(p), true) = (pids, has_pids) {
            if let Err(e) = write("pids.max", p) {
                cg.remove();
                return Err(format!("write pids.max: {e}"));
            }
            cg.pids = true;
        }
        Ok(cg)
    }

    /// Moves `pid` (the init, before it forks) into the cgroup.
    pub(crate) fn adopt(&self, pid: u32) -> Result<(), String> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("write {}/cgroup.procs: {e}", self.dir.display()))
    }

    /// Kills anything still in the cgroup (`cgroup.kill`) and removes it,
    /// retrying for up to two seconds while the processes drain.
    /// Returns whether the directory is gone.
    pub(crate) fn remove(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
                Err(_) if Instant::now() < deadline => {
                    let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => return false,
            }
        }
    }
}

fn getrandom_fill(buf: &mut [u8]) {
    use std::io::Read;
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf)).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> (i * 8)) as u8 ^ std::process::id() as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limits_means_no_cgroup() {
        assert!(WorkerCgroup::create(None, None, None).unwrap_err().contains("no memory or pids"));
    }

    #[test]
    fn a_directory_without_delegation_is_explained() {
        let d = tempfile::tempdir().unwrap();
        let err = delegation(Some(d.path())).unwrap_err();
        assert!(err.contains("does not delegate"), "{err}");
        let err = cgroup_limits_available(Some(d.path())).unwrap_err();
        assert!(err.contains("does not delegate"), "{err}");
    }

    #[test]
    fn both_limits_are_needed_for_real_limits() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.subtree_control"), "cpu memory\n").unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        assert!(delegation(Some(d.path())).is_ok());
        let err = cgroup_limits_available(Some(d.path())).unwrap_err();
        assert!(err.contains("delegates memory but not pids"), "{err}");
        std::fs::write(d.path().join("cgroup.subtree_control"), "memory pids\n").unwrap();
        assert_eq!(cgroup_limits_available(Some(d.path())).unwrap(), d.path());
    }
}
