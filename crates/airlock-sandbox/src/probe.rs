//! What this host supports, for `airlock doctor` and for refusing early.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The kernel features the native tier relies on, as found on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSupport {
    /// A child process could `unshare(CLONE_NEWUSER)`; else why not.
    pub userns: Result<(), String>,
    /// The Landlock ABI version, `None` when Landlock is absent or disabled.
    pub landlock_abi: Option<i32>,
    /// The kernel accepts seccomp filters.
    pub seccomp: bool,
    /// `openat2(2)` is available (not blocked by a seccomp profile).
    pub openat2: bool,
    /// A writable cgroup v2 that delegates memory or pids; else why not.
    pub cgroup_delegation: Result<PathBuf, String>,
    /// A writable cgroup v2 that delegates both memory and pids (what
    /// [`NativeTier::require_cgroup`](crate::NativeTier::require_cgroup)
    /// needs); else why not.
    pub cgroup_limits: Result<PathBuf, String>,
}

impl HostSupport {
    /// `Ok` when the native tier can run here (user namespaces and Landlock);
    /// otherwise the reasons, for a `sandbox.unavailable` refusal.
    pub fn native_ready(&self) -> Result<(), String> {
        let mut why = Vec::new();
        if let Err(e) = &self.userns {
            why.push(format!("user namespaces: {e}"));
        }
        if self.landlock_abi.is_none() {
            why.push("Landlock is not available".to_string());
        }
        if !self.seccomp {
            why.push("seccomp filters are not available".to_string());
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }
}

/// Probes the host. Spawns one short-lived `true` (in a new user
/// namespace, created between fork and exec) and reads a few `/proc` and
/// cgroup files; changes nothing.
pub fn probe() -> HostSupport {
    HostSupport {
        userns: probe_userns(),
        landlock_abi: crate::sys::landlock_abi_version().ok().filter(|v| *v > 0),
        seccomp: crate::sys::seccomp_mode().is_some(),
        openat2: probe_openat2(),
        cgroup_delegation: crate::cgroup::delegation(None).map(|(dir, _, _)| dir),
        cgroup_limits: crate::cgroup::cgroup_limits_available(None),
    }
}

fn probe_userns() -> Result<(), String> {
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or_else(|| "no /usr/bin/true or /bin/true to probe with".to_string())?;
    let mut cmd = Command::new(program);
    cmd.env_clear().stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    crate::sys::unshare_user_at_exec(&mut cmd);
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("probe exited with {s}")),
        Err(e) => Err(format!("unshare(CLONE_NEWUSER): {e}")),
    }
}

fn probe_openat2() -> bool {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    rustix::fs::openat2(CWD, "/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), ResolveFlags::NO_SYMLINKS).is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn probe_runs_and_explains() {
        let p = super::probe();
        // Whatever the host, every negative answer carries a reason.
        if let Err(e) = &p.userns {
            assert!(!e.is_empty());
        }
        if let Err(e) = &p.cgroup_delegation {
            assert!(!e.is_empty());
        }
        println!("{p:?}");
    }
}
