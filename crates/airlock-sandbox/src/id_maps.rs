//! The worker's user-namespace id maps: one id inside (65534), one outside.
//!
//! An unprivileged caller's init maps its own uid and gid from inside its
//! new namespace. A root caller's worker must not be root outside, and a
//! process can only map its *own* id from inside, so for a root caller the
//! caller itself (root in the initial user namespace, holding
//! `CAP_SETUID`/`CAP_SETGID`) writes the init's maps: the init unshares,
//! says so with one byte on a socket pair (`u`), and goes on only when the
//! caller answers that the maps are written (`1`). Until issue 22 a child
//! forked by the init before it unshared (a "mapper") wrote them; the
//! caller doing it saves that fork, its exit and its reaping from every
//! call.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::error::{errno, SandboxError};

/// The byte the init sends once it has unshared.
const UNSHARED: u8 = b'u';
/// The byte the caller answers once the maps are written.
const MAPPED: u8 = b'1';

/// How long the caller waits for the init to unshare before it gives up
/// on the call (the init reads its spec, closes descriptors and unshares
/// first; this bounds an init that hangs there).
const UNSHARE_TIMEOUT: Duration = Duration::from_secs(10);

/// Maps uid/gid 65534 inside to `uid`/`gid` outside for process `pid`
/// (`self` or a number), one line each, after denying `setgroups` (required
/// for an unprivileged gid map; the worker has no use for supplementary
/// groups).
pub(crate) fn write_id_maps(pid: &str, uid: u32, gid: u32) -> Result<(), SandboxError> {
    let id = crate::worker_exec::WORKER_ID;
    let write = |file: String, line: String| {
        std::fs::write(&file, line.as_bytes()).map_err(|e| SandboxError::UidMap { file, line, errno: errno(e) })
    };
    write(format!("/proc/{pid}/setgroups"), "deny".into())?;
    write(format!("/proc/{pid}/uid_map"), format!("{id} {uid} 1"))?;
    write(format!("/proc/{pid}/gid_map"), format!("{id} {gid} 1"))
}

/// The socket pair of the exchange: the caller's end, and the end the init
/// inherits. Both close on exec.
pub(crate) fn socket_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| SandboxError::Descriptor { call: "socketpair(AF_UNIX, SOCK_STREAM)".into(), errno: errno(e) })
}

fn read_byte(fd: &impl AsFd) -> Result<Option<u8>, Errno> {
    let mut b = [0u8; 1];
    loop {
        match rustix::io::read(fd, &mut b) {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(b[0])),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

fn write_byte(fd: &impl AsFd, byte: u8) -> Result<(), Errno> {
    loop {
        match rustix::io::write(fd, &[byte]) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The init's side: unshares, then waits until the caller has written this
/// process's maps. `maps` is closed on return, whatever happens.
pub(crate) fn unshare_mapped_by_caller(
    unshare: impl FnOnce() -> Result<(), SandboxError>,
    maps: OwnedFd,
) -> Result<(), SandboxError> {
    unshare()?;
    let attr = |call: &str, e: Errno| SandboxError::ProcessAttr { call: call.into(), errno: errno(e) };
    write_byte(&maps, UNSHARED).map_err(|e| attr("write(id map socket)", e))?;
    match read_byte(&maps).map_err(|e| attr("read(id map socket)", e))? {
        Some(MAPPED) => Ok(()),
        _ => Err(SandboxError::Protocol("the caller did not write the worker's id maps".into())),
    }
}

/// The caller's side, for the init `pid` (a child not yet reaped, so the
/// number cannot be reused): once the init says it has unshared, maps
/// 65534 inside to `uid`/`gid` outside and answers. The init ending first
/// (end of file) is not an error here: its status says why it ended.
pub(crate) fn map_for_init(maps: &OwnedFd, pid: u32, uid: u32, gid: u32) -> Result<(), SandboxError> {
    if !crate::ready::readable_by(maps, Instant::now() + UNSHARE_TIMEOUT) {
        return Err(SandboxError::Protocol(format!(
            "the sandbox init did not say it had created its namespaces within {} s",
            UNSHARE_TIMEOUT.as_secs()
        )));
    }
    let io = |call: &str, e: Errno| SandboxError::Descriptor { call: call.into(), errno: errno(e) };
    match read_byte(maps).map_err(|e| io("read(id map socket)", e))? {
        None => Ok(()),
        Some(UNSHARED) => {
            write_id_maps(&pid.to_string(), uid, gid)?;
            write_byte(maps, MAPPED).map_err(|e| io("write(id map socket)", e))
        }
        Some(other) => Err(SandboxError::Protocol(format!("the sandbox init sent {other:#04x} for its id maps"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_init_whose_caller_hangs_up_does_not_go_on_unmapped() {
        let (caller, init) = socket_pair().unwrap();
        let unshared = std::thread::spawn(move || unshare_mapped_by_caller(|| Ok(()), init));
        assert_eq!(read_byte(&caller), Ok(Some(UNSHARED)));
        drop(caller);
        let err = unshared.join().unwrap().unwrap_err();
        assert!(matches!(err, SandboxError::Protocol(_)), "{err}");
    }

    #[test]
    fn an_init_that_fails_to_unshare_says_nothing_and_the_caller_leaves_it_to_its_status() {
        let (caller, init) = socket_pair().unwrap();
        let failed = unshare_mapped_by_caller(|| Err(SandboxError::Protocol("no".into())), init);
        assert!(failed.is_err());
        // The init's end is closed: end of file, which is not the caller's error.
        assert!(map_for_init(&caller, std::process::id(), 65534, 65534).is_ok());
    }

    #[test]
    fn a_caller_refuses_anything_but_the_unshared_byte() {
        let (caller, init) = socket_pair().unwrap();
        write_byte(&init, b'x').unwrap();
        let err = map_for_init(&caller, std::process::id(), 65534, 65534).unwrap_err();
        assert!(err.to_string().contains("0x78"), "{err}");
    }
}
