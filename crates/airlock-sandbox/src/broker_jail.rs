//! The filesystem broker's jail: how it is started ([`spawn_broker`]) and
//! how it confines itself ([`confine_broker`]) before it reads a byte.
//!
//! The broker holds one directory handle per granted root and nothing else.
//! [`confine_broker`] runs first in its `main`, single-threaded:
//!
//! 1. closes every descriptor but 0 (the socket), 1 (`/dev/null`), 2 and the
//!    roots (`close_range`);
//! 2. unshares user, mount, network, IPC, UTS and cgroup namespaces and maps
//!    only its own uid and gid (`setgroups` denied);
//! 3. pivots into an empty tmpfs, remounted read-only, and detaches the old
//!    root: no path names a host file any more; the held roots still work;
//! 4. drops privileges: no capabilities (bounding, ambient, effective,
//!    permitted, inheritable), no new privileges, not dumpable, rlimits
//!    (`RLIMIT_NOFILE` 64 + roots, `RLIMIT_NPROC` 0, `RLIMIT_FSIZE` the
//!    largest file it may write + 1 (one 64 KiB frame unless airlock passes
//!    its write budget for chunked writes), `RLIMIT_AS` 256 MiB,
//!    `RLIMIT_CORE` 0);
//! 5. Landlock at the kernel's ABI, handling every file-system right, TCP
//!    bind/connect (denied: no rule) and, from ABI 6, signal and abstract
//!    socket scoping; one rule per root: `r` → read files, `l` → list,
//!    `w` → write files, make regular files, remove files, list (a directory
//!    is synced through a read-only open). Anything short of full
//!    enforcement is an error;
//! 6. a default-deny seccomp allowlist (`broker_jail/filter.rs`); any other
//!    call kills it.
//!
//! # What it does not do
//!
//! The broker runs as the caller's uid (it must create files the operator
//! owns): Landlock, not the uid, keeps it to its roots. A root caller's
//! broker is uid 0 with no capability in any namespace that owns the
//! roots. It shares the host kernel. Its memory is bounded by `RLIMIT_AS`
//! and, where a cgroup is delegated, by the cgroup it shares with the
//! worker of its submission (the caller adopts it into a
//! [`SharedCgroup`](crate::SharedCgroup)); its CPU time only by the
//! submission's deadline.
#![forbid(unsafe_code)]

mod filter;
mod spawn;

use std::os::fd::{OwnedFd, RawFd};

use airlock_fsproto::Rights;
use landlock::{Access, AccessFs, BitFlags, PathBeneath, RulesetCreatedAttr, RulesetStatus, ABI};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use rustix::process::{Resource, Rlimit};
use rustix::thread::UnshareFlags;

use crate::error::{errno, OsErrno, SandboxError};

pub use spawn::{
    broker_argv, spawn_broker, spawn_broker_with, BrokerOptions, BrokerProcess, BROKER_ARGV0, BROKER_FIRST_ROOT_FD,
};

/// Descriptors the broker may hold beyond its roots.
const NOFILE_BASE: u64 = 64;
/// The broker's address space: it handles one request of at most 64 KiB at
/// a time, so this is generous for it and still bounds a broker gone wrong.
const AS_LIMIT: u64 = 256 << 20;
/// Largest file the broker writes by default: one 64 KiB frame (the
/// `RLIMIT_FSIZE` is one byte more, so a file of exactly the bound never
/// meets the limit).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024;
/// Where the empty root is mounted before `pivot_root` (the first that exists).
const MOUNTPOINTS: &[&str] = &["/tmp", "/mnt", "/run", "/var/tmp", "/media", "/srv", "/opt"];
/// The empty root: a directory that nobody can write.
const ROOT_TMPFS_OPTS: &std::ffi::CStr = c"size=4096,nr_inodes=4,mode=0555";

fn attr(call: &str) -> impl FnOnce(rustix::io::Errno) -> SandboxError + '_ {
    move |e| SandboxError::ProcessAttr { call: call.to_string(), errno: errno(e) }
}

/// The Landlock rights of a root granted `rights` at `abi`. Pure.
pub(crate) fn landlock_access(rights: Rights, abi: ABI) -> BitFlags<AccessFs> {
    let mut want = BitFlags::<AccessFs>::empty();
    if rights.read {
        want |= AccessFs::ReadFile;
    }
    if rights.list {
        want |= AccessFs::ReadDir;
    }
    if rights.write {
        want |= AccessFs::WriteFile | AccessFs::MakeReg | AccessFs::RemoveFile | AccessFs::ReadDir;
    }
    want & AccessFs::from_all(abi)
}

/// How much of a chunked write starts for the disk at a time.
const WRITEBACK_BYTES: u64 = 1 << 20;

/// After an append took `file` from `before` to `after` bytes, starts
/// writing back the last whole MiB it completed, without waiting
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which the broker's filter
/// allows): a chunked write's bytes start for the disk as they arrive, so
/// the `fsync` at its commit, which alone makes them durable, waits on at
/// most the last MiB's writeback instead of the whole file's (64 MiB:
/// about 22 ms of `fsync` became 1–4 ms here). Best effort: only how long
/// that `fsync` takes depends on it. The broker and airlock (appending to
/// a file the broker handed over) both call it.
pub fn start_writeback_after_append(file: std::os::fd::BorrowedFd<'_>, before: u64, after: u64) {
    if before / WRITEBACK_BYTES != after / WRITEBACK_BYTES {
        let end = after / WRITEBACK_BYTES * WRITEBACK_BYTES;
        let _ = crate::sys::start_writeback(file, end - WRITEBACK_BYTES, WRITEBACK_BYTES);
    }
}

/// Confines the calling process to `roots` (descriptor, rights), in the
/// order described in the module documentation, and returns the roots as
/// owned descriptors, in order. Call it first in `main`, before any thread
/// exists and before reading any input. Each descriptor must be at least 3,
/// listed once, open, and a directory.
///
/// `max_file_bytes` bounds every file it writes (`RLIMIT_FSIZE` one more).
pub fn confine_broker(roots: &[(RawFd, Rights)], max_file_bytes: u64) -> Result<Vec<OwnedFd>, SandboxError> {
    let fds = adopt_roots(roots)?;
    let caller = rustix::process::getppid();
    // 1. Descriptors.
    let keep: Vec<RawFd> = roots.iter().map(|r| r.0).collect();
    crate::sys::close_fds_except(&keep)
        .map_err(|e| SandboxError::ProcessAttr { call: "close_range(3.., ~0U, 0)".into(), errno: errno(e) })?;
    // 2. Namespaces, mapping only our own ids.
    let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
    let flags = UnshareFlags::NEWUSER
        | UnshareFlags::NEWNS
        | UnshareFlags::NEWNET
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS
        | UnshareFlags::NEWCGROUP;
    crate::sys::unshare_namespaces(flags).map_err(|e| SandboxError::Unshare {
        flags: "CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWCGROUP".into(),
        errno: errno(e),
    })?;
    let write = |file: &str, line: String| {
        std::fs::write(file, line.as_bytes()).map_err(|e| SandboxError::UidMap {
            file: file.into(),
            line,
            errno: errno(e),
        })
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    // 3. An empty, read-only root.
    empty_root()?;
    // 4. Privileges and limits.
    drop_privileges(caller)?;
    set_rlimits(roots.len() as u64, max_file_bytes.saturating_add(1))?;
    // 5. Landlock, 6. seccomp (compiled before it is installed: no
    // allocation constraints, but the filtered window stays small).
    enforce_landlock(&fds, roots)?;
    let program = filter::compile_broker_filter()?;
    seccompiler::apply_filter(&program)
        .map_err(|e| SandboxError::Seccomp(format!("seccomp(SECCOMP_SET_MODE_FILTER, broker allowlist): {e}")))?;
    Ok(fds)
}

fn adopt_roots(roots: &[(RawFd, Rights)]) -> Result<Vec<OwnedFd>, SandboxError> {
    let mut numbers: Vec<RawFd> = roots.iter().map(|r| r.0).collect();
    numbers.sort_unstable();
    numbers.dedup();
    if numbers.len() != roots.len() || numbers.first().is_some_and(|&fd| fd < 3) {
        return Err(SandboxError::InvalidSpec("root descriptors must be distinct and at least 3".into()));
    }
    let mut fds = Vec::with_capacity(roots.len());
    for &(fd, _) in roots {
        let owned = crate::sys::adopt_inherited_fd(fd)
            .map_err(|e| SandboxError::ProcessAttr { call: format!("fcntl({fd}, F_GETFD)"), errno: errno(e) })?;
        let st = rustix::fs::fstat(&owned).map_err(attr("fstat(root)"))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
            return Err(SandboxError::InvalidSpec(format!("root descriptor {fd} is not a directory")));
        }
        fds.push(owned);
    }
    Ok(fds)
}

fn empty_root() -> Result<(), SandboxError> {
    rustix::mount::mount_change("/", MountPropagationFlags::REC | MountPropagationFlags::PRIVATE)
        .map_err(|e| SandboxError::MountPropagation { errno: errno(e) })?;
    let at = MOUNTPOINTS
        .iter()
        .copied()
        .find(|m| std::path::Path::new(m).symlink_metadata().is_ok_and(|md| md.is_dir()))
        .ok_or_else(|| SandboxError::BuildRoot {
            call: format!("find a mount point for the empty root among {MOUNTPOINTS:?}"),
            errno: OsErrno(libc::ENOENT),
        })?;
    let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    rustix::mount::mount("tmpfs", at, "tmpfs", flags, ROOT_TMPFS_OPTS).map_err(|e| SandboxError::MountTmpfs {
        target: at.into(),
        flags: "MS_NOSUID|MS_NODEV|MS_NOEXEC".into(),
        options: ROOT_TMPFS_OPTS.to_string_lossy().into_owned(),
        errno: errno(e),
    })?;
    rustix::process::chdir(at).map_err(|e| SandboxError::Chdir { path: at.into(), errno: errno(e) })?;
    rustix::process::pivot_root(".", ".")
        .map_err(|e| SandboxError::PivotRoot { new_root: at.into(), errno: errno(e) })?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).map_err(|e| SandboxError::UmountOldRoot { errno: errno(e) })?;
    rustix::process::chdir("/").map_err(|e| SandboxError::Chdir { path: "/".into(), errno: errno(e) })?;
    let ro = MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    rustix::mount::mount_remount("/", ro, "").map_err(|e| SandboxError::Remount {
        call: "mount(NULL, \"/\", NULL, MS_REMOUNT|MS_BIND|MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC, NULL)".into(),
        errno: errno(e),
    })
}

fn drop_privileges(caller: Option<rustix::process::Pid>) -> Result<(), SandboxError> {
    crate::worker_exec::drop_all_capabilities()?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(attr("prctl(PR_SET_DUMPABLE, 0)"))?;
    // Credential changes may clear the parent-death signal: arm it again,
    // and stop if the parent died while it was not armed.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(attr("prctl(PR_SET_PDEATHSIG, SIGKILL)"))?;
    if rustix::process::getppid() != caller {
        return Err(SandboxError::ProcessAttr {
            call: "getppid() after re-arming PR_SET_PDEATHSIG".into(),
            errno: OsErrno(libc::ESRCH),
        });
    }
    Ok(())
}

fn set_rlimits(roots: u64, fsize: u64) -> Result<(), SandboxError> {
    let set = |res: Resource, name: &str, value: u64| -> Result<(), SandboxError> {
        // Never above the current hard limit (raising it needs privilege).
        let value = rustix::process::getrlimit(res).maximum.map_or(value, |max| value.min(max));
        rustix::process::setrlimit(res, Rlimit { current: Some(value), maximum: Some(value) })
            .map_err(|e| SandboxError::Rlimit { resource: name.into(), value, errno: errno(e) })
    };
    set(Resource::Nofile, "RLIMIT_NOFILE", NOFILE_BASE + roots)?;
    set(Resource::Nproc, "RLIMIT_NPROC", 0)?;
    set(Resource::Fsize, "RLIMIT_FSIZE", fsize)?;
    set(Resource::As, "RLIMIT_AS", AS_LIMIT)?;
    set(Resource::Core, "RLIMIT_CORE", 0)
}

fn enforce_landlock(fds: &[OwnedFd], roots: &[(RawFd, Rights)]) -> Result<(), SandboxError> {
    let (mut created, _, abi) = crate::landlock::deny_all_ruleset()?;
    let err = |what: &str, e: &dyn std::fmt::Display| SandboxError::Landlock(format!("{what}: {e}"));
    for (i, (fd, (_, rights))) in fds.iter().zip(roots).enumerate() {
        created = created
            .add_rule(PathBeneath::new(fd, landlock_access(*rights, abi)))
            .map_err(|e| err(&format!("landlock_add_rule(root {i}, {rights})"), &e))?;
    }
    let status = created.restrict_self().map_err(|e| err("landlock_restrict_self", &e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other => Err(SandboxError::Landlock(format!("the kernel enforced the broker ruleset {other:?}, not fully"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_right_maps_to_its_landlock_rights_only() {
        let r = |s| Rights::parse(s).unwrap();
        for abi in [ABI::V1, ABI::V3, ABI::V7] {
            let read = landlock_access(r("r"), abi);
            assert_eq!(read, AccessFs::ReadFile);
            assert_eq!(landlock_access(r("l"), abi), AccessFs::ReadDir);
            let write = landlock_access(r("w"), abi);
            assert!(write.contains(AccessFs::WriteFile | AccessFs::MakeReg | AccessFs::RemoveFile));
            assert!(!write.intersects(AccessFs::ReadFile | AccessFs::Execute | AccessFs::Truncate | AccessFs::Refer));
            assert!(!write.intersects(AccessFs::MakeSym | AccessFs::MakeDir | AccessFs::RemoveDir | AccessFs::MakeFifo));
            let all = landlock_access(r("rwl"), abi);
            assert!(!all.intersects(AccessFs::Execute | AccessFs::MakeSock | AccessFs::MakeChar | AccessFs::MakeBlock));
        }
    }
}
