//! Per-call private staging under `STATE/staging/ID@PID.START/`: the output
//! file the worker's export lands in. The directory's name carries its
//! owner's identity (pid and start time), so a later call or `airlock
//! staging gc` can tell a live call's staging from one left by a process
//! that was killed, with no window in which a new directory has no owner.
//!
//! The worker never sees this directory: the sandbox receives open file
//! descriptors, and its init copies input bytes into the worker's own tmpfs.

use airlock_core::{ReasonCode, Refusal};
use airlock_hostfs::PrivateDir;
use serde::Serialize;

/// Directory under the state dir.
pub const STAGING: &str = "staging";
/// The output file inside a call's staging directory.
pub const OUTPUT_FILE: &str = "output";

/// `(pid, start time in clock ticks since boot)` of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcessIdentity {
    /// Process id.
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`, so a reused pid is not mistaken for the owner.
    pub start_ticks: u64,
}

impl ProcessIdentity {
    /// This process.
    pub fn current() -> Option<ProcessIdentity> {
        ProcessIdentity::of(std::process::id())
    }

    /// The live process `pid`, if it exists.
    pub fn of(pid: u32) -> Option<ProcessIdentity> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses; fields
        // after the last ')' are plain.
        let rest = &stat[stat.rfind(')')? + 1..];
        let start_ticks = rest.split_whitespace().nth(19)?.parse().ok()?;
        Some(ProcessIdentity { pid, start_ticks })
    }

    fn encode(&self) -> String {
        format!("{}.{}", self.pid, self.start_ticks)
    }

    fn decode(s: &str) -> Option<ProcessIdentity> {
        let (pid, ticks) = s.split_once('.')?;
        Some(ProcessIdentity { pid: pid.parse().ok()?, start_ticks: ticks.parse().ok()? })
    }

    /// Whether this exact process is still alive.
    pub fn alive(&self) -> bool {
        ProcessIdentity::of(self.pid) == Some(*self)
    }
}

/// The shared staging directory.
#[derive(Debug)]
pub struct StagingArea {
    dir: PrivateDir,
}

/// One call's staging directory; removed when dropped.
#[derive(Debug)]
pub struct CallStaging<'a> {
    area: &'a StagingArea,
    name: String,
    dir: PrivateDir,
}

/// One entry of `airlock staging status`.
#[derive(Debug, Clone, Serialize)]
pub struct StagingEntry {
    /// Invocation id.
    pub invocation_id: String,
    /// The process that owns it, if recorded.
    pub owner: Option<ProcessIdentity>,
    /// Whether that process is alive.
    pub live: bool,
    /// The directory's name.
    #[serde(skip)]
    name: String,
}

impl StagingArea {
    /// Opens (creating) `STATE/staging`.
    pub fn open(state: &PrivateDir) -> Result<StagingArea, Refusal> {
        Ok(StagingArea { dir: state.ensure_subdir(STAGING)? })
    }

    /// Creates the staging directory of invocation `id`, owned by this process.
    pub fn create(&self, id: &str) -> Result<CallStaging<'_>, Refusal> {
        let me = ProcessIdentity::current()
            .ok_or_else(|| Refusal::new(ReasonCode::Internal, "cannot read this process's identity from /proc"))?;
        let name = format!("{id}@{}", me.encode());
        let dir = self.dir.create_subdir(&name).map_err(|e| {
            Refusal::new(ReasonCode::InvocationDuplicate, format!("staging for {id:?} already exists: {}", e.message()))
        })?;
        Ok(CallStaging { area: self, name, dir })
    }

    /// Every staging directory and whether its owner lives.
    pub fn status(&self) -> Result<Vec<StagingEntry>, Refusal> {
        let mut out = Vec::new();
        for name in self.dir.entries()? {
            let (id, owner) = match name.rsplit_once('@') {
                Some((id, owner)) => (id.to_owned(), ProcessIdentity::decode(owner)),
                None => (name.clone(), None),
            };
            out.push(StagingEntry { live: owner.is_some_and(|o| o.alive()), invocation_id: id, owner, name });
        }
        Ok(out)
    }

    /// Removes every staging directory whose owner is gone (or never
    /// recorded itself). Removal goes through handles and never follows a
    /// link. Returns the ids removed.
    pub fn reap_stale(&self) -> Result<Vec<String>, Refusal> {
        let mut removed = Vec::new();
        for entry in self.status()? {
            if !entry.live {
                self.dir.remove_tree(&entry.name)?;
                removed.push(entry.invocation_id);
            }
        }
        if !removed.is_empty() {
            self.dir.sync()?;
        }
        Ok(removed)
    }
}

impl CallStaging<'_> {
    /// The call's private directory.
    pub fn dir(&self) -> &PrivateDir {
        &self.dir
    }
}

impl Drop for CallStaging<'_> {
    fn drop(&mut self) {
        let _ = self.area.dir.remove_tree(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_of_self_is_alive_and_a_dead_pid_is_not() {
        let me = ProcessIdentity::current().unwrap();
        assert!(me.alive());
        assert_eq!(ProcessIdentity::decode(&me.encode()), Some(me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = ProcessIdentity::of(child.id());
        child.wait().unwrap();
        if let Some(id) = id {
            assert!(!id.alive());
        }
        let fake = ProcessIdentity { pid: me.pid, start_ticks: me.start_ticks + 1 };
        assert!(!fake.alive(), "a reused pid with another start time is not the owner");
    }
}
