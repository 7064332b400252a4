//! Memory and process-count limits through a delegated cgroup v2, where
//! the host offers one. Where it does not, nothing fails: the outcome says
//! which limits were applied and why the others were not.
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
fn cgroup2_mount() -> Result<PathBuf, String> {
    let info =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
    info.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if post.split(' ').next()? == "cgroup2" {
                Some(PathBuf::from(pre.split(' ').nth(4)?))
            } else {
                None
            }
        })
        .ok_or_else(|| "no cgroup2 file system is mounted".to_string())
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

impl WorkerCgroup {
    /// Makes `airlock-<random>` under the delegated parent and writes the
    /// limits. `Err` says why no cgroup limit applies.
    pub(crate) fn create(parent: Option<&Path>, memory: Option<u64>, pids: Option<u64>) -> Result<Self, String> {
        if memory.is_none() && pids.is_none() {
            return Err("no memory or pids limit was requested".into());
        }
        let (base, has_mem, has_pids) = delegation(parent)?;
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
    }
}
