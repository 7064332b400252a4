//! Which process owns a reservation: `(pid, start time)`, so a reused pid
//! is never mistaken for the owner.

use serde::{Deserialize, Serialize};

/// `(pid, start time in clock ticks since boot)` of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// Process id.
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`.
    pub start_ticks: u64,
}

impl ProcessIdentity {
    /// This process.
    pub fn current() -> Option<ProcessIdentity> {
        ProcessIdentity::of(std::process::id())
    }

    /// The live process `pid`, if it exists.
    pub fn of(pid: u32) -> Option<ProcessIdentity> {
        stat_of(pid).map(|(_, start_ticks)| ProcessIdentity { pid, start_ticks })
    }

    /// `PID.START`, as used in file names.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.pid, self.start_ticks)
    }

    /// The inverse of [`ProcessIdentity::encode`].
    pub fn decode(s: &str) -> Option<ProcessIdentity> {
        let (pid, ticks) = s.split_once('.')?;
        Some(ProcessIdentity { pid: pid.parse().ok()?, start_ticks: ticks.parse().ok()? })
    }

    /// Whether this exact process is still alive.
    /// A zombie is not: it holds nothing and never runs again (a killed
    /// holder whose parent has not reaped it yet).
    pub fn alive(&self) -> bool {
        matches!(stat_of(self.pid), Some((state, ticks)) if ticks == self.start_ticks && !matches!(state, 'Z' | 'X'))
    }
}

/// The state letter and start time (clock ticks) of process `pid`.
fn stat_of(pid: u32) -> Option<(char, u64)> {
    use std::io::Read;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    // The line ends with a newline and is far shorter than the buffer, so
    // one read usually has it all.
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    while !buf[..len].ends_with(b"\n") {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // The command name (field 2) may hold spaces, parentheses and bytes
    // that are not UTF-8; fields after the last ')' are plain.
    let close = buf[..len].iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&buf[close + 1..len]).ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some((state, start_ticks))
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
