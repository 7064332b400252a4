//! Every raw system call of the crate that needs `unsafe`, each behind a
//! safe function with its precondition checked or documented. Everything
//! else in the crate is `#![forbid(unsafe_code)]`.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The result of [`fork_single_threaded`].
pub(crate) enum Forked {
    /// In the parent: the child's pid.
    Parent(i32),
    /// In the child.
    Child,
}

/// Number of threads of the calling process, from `/proc/self/task`.
fn thread_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// `fork(2)`, refused unless the calling process has exactly one thread, so
/// the child may allocate and run ordinary code afterwards.
pub(crate) fn fork_single_threaded() -> io::Result<Forked> {
    if thread_count()? != 1 {
        return Err(io::Error::other("fork refused: the process has more than one thread"));
    }
    // SAFETY: the process has one thread (checked above; the init never starts
    // threads), so no lock can be held by a thread that does not exist in the child.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        p => Ok(Forked::Parent(p)),
    }
}

/// `unshare(2)` of namespaces only (never `CLONE_FILES`/`CLONE_FS`-style flags).
pub(crate) fn unshare_namespaces(flags: rustix::thread::UnshareFlags) -> io::Result<()> {
    use rustix::thread::UnshareFlags as F;
    let ns = F::NEWNS | F::NEWUSER | F::NEWPID | F::NEWNET | F::NEWIPC | F::NEWUTS | F::NEWCGROUP | F::NEWTIME;
    if !ns.contains(flags) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: only namespace flags are passed; none of them changes the fd
    // table or memory the Rust runtime relies on.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(io::Error::from)
}

/// `kill(-1, SIGKILL)`: from PID 1 of a pid namespace, every other process of
/// the namespace.
pub(crate) fn kill_all_but_self() -> io::Result<()> {
    // SAFETY: plain syscall with constant arguments, no memory involved.
    let r = unsafe { libc::kill(-1, libc::SIGKILL) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Closes every descriptor `>= 3` except those in `keep` (`close_range(2)`).
pub(crate) fn close_fds_except(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&fd| fd >= 3).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut first: u32 = 3;
    for fd in keep {
        let fd = fd as u32;
        if fd > first {
            close_range(first, fd - 1)?;
        }
        first = fd + 1;
    }
    close_range(first, u32::MAX)
}

fn close_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: closing descriptors this process owns; callers keep what they
    // still use and no Rust object outlives these numbers (the init owns its
    // inherited descriptors only by number until it adopts them).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `execve(2)`; returns only on failure.
pub(crate) fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: `path`, every argv/envp string and both NULL-terminated arrays
    // live until the call returns (it only returns on failure).
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    io::Error::last_os_error()
}

/// Drops every capability `0..=cap_last_cap` from the bounding set
/// (`prctl(PR_CAPBSET_DROP)`), including ones newer than any crate's list.
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    let last: u64 =
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(63);
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                break; // past the kernel's last capability
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Makes the mount at `path` and every mount beneath it read-only, nosuid
/// and nodev (`mount_setattr(2)` with `AT_RECURSIVE`), leaving atime flags
/// alone so locked flags inherited from the host are never touched.
pub(crate) fn mount_setattr_readonly_recursive(path: &CStr) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` is a properly sized,
    // initialised `struct mount_attr` that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The Landlock ABI version of the running kernel
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`).
pub(crate) fn landlock_abi_version() -> Result<i32, io::Error> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute pointer and size 0 the kernel reads no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// Restores default dispositions for every catchable signal and unblocks all
/// signals, so the tool does not inherit the Rust runtime's `SIGPIPE` ignore.
pub(crate) fn reset_signals() -> io::Result<()> {
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL involves no handler code; EINVAL for
        // signals the C library reserves is ignored.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: `set` is a valid, initialised sigset_t owned by this frame.
    let r = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut())
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Arranges for `cmd`'s child to receive SIGKILL when the spawning thread
/// exits (`PR_SET_PDEATHSIG`), and to fail its spawn if the caller is already
/// gone by then.
pub(crate) fn die_with_parent_at_exec(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec in the child; prctl and
    // getppid are async-signal-safe and nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// `prctl(PR_GET_SECCOMP)`: `Some(mode)` when the kernel supports seccomp.
pub(crate) fn seccomp_mode() -> Option<i32> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    (r >= 0).then_some(r)
}

/// Arranges for `cmd`'s child to `unshare(CLONE_NEWUSER)` before `exec` (the
/// user-namespace probe; a failure surfaces as the spawn error).
pub(crate) fn unshare_user_at_exec(cmd: &mut Command) {
    // SAFETY: unshare is a plain syscall, async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Takes ownership of a descriptor the init inherited by number.
///
/// Fails unless `fd` is open. Each number is adopted at most once: the
/// init adopts the numbers listed in its spec, which it checked are distinct.
pub(crate) fn adopt_inherited_fd(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: `fd` is open (checked above), was inherited for this purpose,
    // and no other owner exists: the spec lists each number once and the init
    // adopts it exactly once.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Arranges for `cmd`'s child to get each `(source, target)` descriptor
/// duplicated onto `target` (`dup2`, which leaves `target` inherited across
/// `exec`) between fork and exec. Refused (`EINVAL`) unless every target is
/// at least 3 and every source is above every target, so no `dup2` can
/// overwrite a source that has yet to be moved.
pub(crate) fn move_fds_at_exec(cmd: &mut Command, moves: Vec<(RawFd, RawFd)>) -> io::Result<()> {
    let highest_target = moves.iter().map(|m| m.1).max().unwrap_or(2);
    let ordered = moves.iter().all(|&(source, target)| target >= 3 && source > highest_target);
    let mut targets: Vec<RawFd> = moves.iter().map(|m| m.1).collect();
    targets.sort_unstable();
    targets.dedup();
    if !ordered || targets.len() != moves.len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: the closure runs between fork and exec in the child; dup2 is
    // async-signal-safe and nothing is allocated (the Vec was built before
    // the fork).
    unsafe {
        cmd.pre_exec(move || {
            for &(source, target) in &moves {
                if libc::dup2(source, target) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(())
}

/// Arranges for `cmd`'s child to `unshare(flags)` before `exec` (the
/// microVM tier's VMM: its own user, network, IPC and UTS namespaces); a
/// failure surfaces as the spawn error.
pub(crate) fn unshare_at_exec(cmd: &mut Command, flags: libc::c_int) {
    // SAFETY: unshare is a plain syscall, async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(flags) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0)` then `connect` to
/// `cid:port` (the microVM guest's stream to its host under Firecracker).
pub(crate) fn vsock_connect(cid: u32, port: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: socket with integer arguments only; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_vm is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_cid = cid;
    addr.svm_port = port;
    // SAFETY: `addr` is a valid sockaddr_vm and the length given is its size;
    // connect only reads it.
    let r = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_vm).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}

/// Linux's `F_SETSIG` (`<fcntl.h>`, `_GNU_SOURCE`), which the `libc` crate
/// does not export for this target.
const F_SETSIG: libc::c_int = 10;

/// `fcntl(fd, F_SETSIG, SIGURG)` then `fcntl(fd, F_SETLEASE, F_RDLCK)`:
/// a read lease on the open file description of `fd`.
///
/// The kernel refuses it (`EAGAIN`) while the file is open for writing
/// anywhere, and (`EACCES`) unless the caller owns the file or has
/// `CAP_LEASE`. Once it is held, an `open` for writing or a `truncate`
/// of the inode by anyone waits until it is released (or for
/// `/proc/sys/fs/lease-break-time` seconds, after which the kernel takes
/// it away), and the holder is signalled. That signal is `SIGIO` unless
/// `F_SETSIG` says otherwise, and `SIGIO`'s default action ends the
/// process: `SIGURG`'s is to ignore it, and nothing in airlock uses
/// out-of-band data. The break is observed by [`lease_kind`] instead.
pub(crate) fn take_read_lease(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl(F_SETSIG) takes an int and changes only the signal
    // this open file description raises; `fd` is borrowed, so open.
    if unsafe { libc::fcntl(fd.as_raw_fd(), F_SETSIG, libc::SIGURG) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl(F_SETLEASE) takes an int and changes only the leases
    // of this open file description; `fd` is borrowed, so open.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fcntl(fd, F_GETLEASE)`: `F_RDLCK` while a read lease is held and no
/// one has asked to write; `F_UNLCK` once a break is pending or the
/// lease is gone.
pub(crate) fn lease_kind(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<libc::c_int> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl(F_GETLEASE) only queries; `fd` is borrowed, so open.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// `fcntl(fd, F_SETLEASE, F_UNLCK)`: releases this open file
/// description's lease, letting a waiting writer go on.
pub(crate) fn release_lease(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl(F_SETLEASE) takes an int and changes only the leases
    // of this open file description; `fd` is borrowed, so open.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `sync_file_range(fd, offset, len, SYNC_FILE_RANGE_WRITE)`: starts
/// writing back the range's dirty pages without waiting for them (no
/// durability on its own; a later `fsync` still decides it).
pub(crate) fn start_writeback(fd: std::os::fd::BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (offset, len) = (
        libc::off64_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        libc::off64_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
    );
    // SAFETY: integer arguments only, on a descriptor the caller borrows
    // for the call; the result is checked.
    let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`spawn_vforked`] starts: `program` with `argv` (its `argv[0]`
/// first) and an empty environment, in `cwd`, with `stdio` on 0, 1 and 2,
/// `keep` inherited at their numbers, every other descriptor left to its
/// close-on-exec flag, no blocked signals and `SIGPIPE` at its default.
pub(crate) struct VforkSpawn<'a> {
    pub program: &'a CStr,
    pub argv: &'a [CString],
    pub cwd: &'a CStr,
    pub stdio: [RawFd; 3],
    pub keep: &'a [RawFd],
}

/// Starts a process with `posix_spawn(3)`, which glibc makes with
/// `clone(CLONE_VM | CLONE_VFORK)`: the caller's address space is shared
/// until the child's `exec`, not copied as `fork` copies it (the caller is
/// a large, multi-threaded program; a fork copies its page tables and
/// write-protects every private page the caller then faults on again).
/// Every descriptor must be at least 3, so no `dup2` onto 0, 1 or 2
/// replaces a descriptor a later action still reads (`EINVAL` otherwise).
pub(crate) fn spawn_vforked(how: &VforkSpawn<'_>) -> io::Result<rustix::process::Pid> {
    if how.stdio.iter().chain(how.keep).any(|&fd| fd < 3) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut argv: Vec<*mut libc::c_char> = how.argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let check = |r: libc::c_int| if r == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(r)) };
    // SAFETY: the file actions and attributes are initialised before use
    // and destroyed on every path (the guards below); every pointer passed
    // (program, cwd, argv and its strings, envp) outlives the call, and argv
    // and envp end with a null pointer. posix_spawn itself runs only
    // async-signal-safe code in the child before exec.
    unsafe {
        let mut actions = std::mem::MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
        check(libc::posix_spawn_file_actions_init(actions.as_mut_ptr()))?;
        let actions = SpawnActions(actions.assume_init());
        let mut attr = std::mem::MaybeUninit::<libc::posix_spawnattr_t>::uninit();
        check(libc::posix_spawnattr_init(attr.as_mut_ptr()))?;
        let attr = SpawnAttr(attr.assume_init());
        let fa = std::ptr::addr_of!(actions.0).cast_mut();
        let at = std::ptr::addr_of!(attr.0).cast_mut();
        for (target, &source) in how.stdio.iter().enumerate() {
            check(libc::posix_spawn_file_actions_adddup2(fa, source, target as libc::c_int))?;
        }
        // glibc (2.29 on) clears close-on-exec when a descriptor is
        // duplicated onto itself: inherited in the child only.
        for &fd in how.keep {
            check(libc::posix_spawn_file_actions_adddup2(fa, fd, fd))?;
        }
        check(libc::posix_spawn_file_actions_addchdir_np(fa, how.cwd.as_ptr()))?;
        let mut none = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(none.as_mut_ptr());
        check(libc::posix_spawnattr_setsigmask(at, none.as_ptr()))?;
        let mut pipe = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(pipe.as_mut_ptr());
        libc::sigaddset(pipe.as_mut_ptr(), libc::SIGPIPE);
        check(libc::posix_spawnattr_setsigdefault(at, pipe.as_ptr()))?;
        check(libc::posix_spawnattr_setflags(at, (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as _))?;
        let mut pid: libc::pid_t = 0;
        check(libc::posix_spawn(&mut pid, how.program.as_ptr(), fa, at, argv.as_ptr(), envp.as_ptr()))?;
        rustix::process::Pid::from_raw(pid).ok_or_else(|| io::Error::other("posix_spawn gave pid 0"))
    }
}

struct SpawnActions(libc::posix_spawn_file_actions_t);

impl Drop for SpawnActions {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawn_file_actions_init, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct SpawnAttr(libc::posix_spawnattr_t);

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawnattr_init, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}
