//! The sandbox init: a program executed with a hidden marker (airlock's
//! small `airlock-sandbox-init`, or the caller's own executable), so every
//! privileged step runs in a fresh, single-threaded process and the
//! (possibly multi-threaded) caller never forks without exec. The init
//! refuses a spec sent by another build ([`SandboxError::InitMismatch`]).
//!
//! Call [`maybe_run_init`] first thing in `main()` of any binary that is
//! passed to [`NativeTier::new`](crate::native::NativeTier::new).
#![forbid(unsafe_code)]

use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Gid, Pid, PidfdFlags, Signal, Uid, WaitOptions};
use rustix::thread::UnshareFlags;

use crate::error::{errno, OsErrno, SandboxError};
use crate::pid1::Inherited;
use crate::sys::Forked;
use crate::wire::{same_build, InitSpec, SkeletonSpec, StatusMsg, StatusWriter, MAX_SPEC_BYTES};

/// The hidden `argv[1]` that turns a binary into the sandbox init.
pub const INIT_MARKER: &str = "__airlock_sandbox_init";

/// The hidden `argv[2]` that makes the init a warm sandbox's skeleton
/// ([`crate::warm`]), which reads a [`SkeletonSpec`] instead of an [`InitSpec`].
pub(crate) const WARM_MARKER: &str = "warm";

/// How long past its own deadline the init waits before killing PID 1
/// itself (the caller normally kills first; this covers a caller that died).
const INIT_DEADLINE_GRACE: Duration = Duration::from_secs(3);

/// Exit codes of the init when it cannot report on the status pipe.
const EXIT_NO_SPEC: i32 = 121;

/// If `argv[1]` is [`INIT_MARKER`], runs the sandbox init and exits;
/// otherwise returns at once. Call it before anything else in `main()`:
/// before threads are started and before any output.
pub fn maybe_run_init() {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() == Some(std::ffi::OsStr::new(INIT_MARKER)) {
        run_init()
    }
}

/// Reads one JSON document (then end-of-file) from stdin and the status
/// pipe it names, or exits [`EXIT_NO_SPEC`].
fn read_spec<T: serde::de::DeserializeOwned>(status_fd: impl Fn(&T) -> i32) -> (T, StatusWriter) {
    let mut raw = Vec::new();
    let read = std::io::stdin().lock().take(MAX_SPEC_BYTES as u64 + 1).read_to_end(&mut raw);
    let spec: T = match read.ok().and_then(|_| serde_json::from_slice(&raw).ok()) {
        Some(s) if raw.len() <= MAX_SPEC_BYTES => s,
        _ => std::process::exit(EXIT_NO_SPEC),
    };
    match crate::sys::adopt_inherited_fd(status_fd(&spec)).and_then(StatusWriter::new) {
        Ok(status) => (spec, status),
        Err(_) => std::process::exit(EXIT_NO_SPEC),
    }
}

fn run_init() -> ! {
    if let Some(caller) = std::env::args_os().nth(2).and_then(|a| {
        a.to_str().and_then(|a| a.strip_prefix(crate::wire::DIE_WITH_PREFIX)).map(|pid| pid.parse::<i32>().ok())
    }) {
        die_with_caller(caller);
    }
    let result = if std::env::args_os().nth(2).as_deref() == Some(std::ffi::OsStr::new(WARM_MARKER)) {
        let (spec, status) = read_spec(|s: &SkeletonSpec| s.status_fd);
        (init_skeleton(&spec, &status), status)
    } else {
        let (spec, status) = read_spec(|s: &InitSpec| s.status_fd);
        (init(&spec, &status), status)
    };
    match result {
        (Ok(code), _) => std::process::exit(code),
        (Err(error), status) => {
            status.send(&StatusMsg::SetupFailed { error });
            std::process::exit(125)
        }
    }
}

/// Arms `SIGKILL` for when the thread that spawned this init exits, then
/// exits unless the parent is still `caller` (a caller that died before the
/// signal was armed would never send it).
fn die_with_caller(caller: Option<i32>) {
    let armed = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if armed.is_err() || caller.is_none() || parent != caller {
        std::process::exit(EXIT_NO_SPEC);
    }
}

fn adopt(fd: i32) -> Result<OwnedFd, SandboxError> {
    crate::sys::adopt_inherited_fd(fd)
        .map_err(|e| SandboxError::ProcessAttr { call: format!("fcntl({fd}, F_GETFD)"), errno: errno(e) })
}

fn set_cloexec(fd: &OwnedFd) -> Result<(), SandboxError> {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| SandboxError::ProcessAttr { call: "fcntl(F_SETFD, FD_CLOEXEC)".into(), errno: errno(e) })
}

/// Closes every descriptor but stdio and `keep`.
fn keep_only(keep: &[i32]) -> Result<(), SandboxError> {
    crate::sys::close_fds_except(keep)
        .map_err(|e| SandboxError::ProcessAttr { call: "close_range(3.., ~0U, 0)".into(), errno: errno(e) })
}

fn lifeline() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SandboxError::ProcessAttr { call: "pipe2(O_CLOEXEC)".into(), errno: errno(e) })
}

fn fork_pid1() -> Result<Forked, SandboxError> {
    crate::sys::fork_single_threaded().map_err(|e| SandboxError::Fork { role: "pid 1".into(), errno: errno(e) })
}

/// A warm sandbox's init ([`crate::warm`]): the namespaces and PID 1 of a
/// skeleton, which waits for its one call on the channel; the init waits
/// for PID 1, killing it if the caller goes away first.
fn init_skeleton(spec: &SkeletonSpec, status: &StatusWriter) -> Result<i32, SandboxError> {
    same_build(&spec.build)?;
    spec.check()?;
    keep_only(&spec.inherited_fds())?;
    let channel = adopt(spec.call_fd)?;
    set_cloexec(&channel)?;
    enter_namespaces(spec.maps_fd.map(adopt).transpose()?)?;
    let (lifeline_r, lifeline_w) = lifeline()?;
    let pid1 = match fork_pid1()? {
        Forked::Child => {
            drop(lifeline_w);
            crate::pid1::run_skeleton(spec, status, lifeline_r, channel)
        }
        Forked::Parent(pid) => pid,
    };
    drop(lifeline_r);
    status.send(&StatusMsg::Pid1 { host_pid: pid1 });
    wait_for_pid1(pid1, Watch::CallerGone(&channel), status)
}

fn init(spec: &InitSpec, status: &StatusWriter) -> Result<i32, SandboxError> {
    same_build(&spec.build)?;
    spec.check()?;
    // Only the descriptors the spec names survive.
    keep_only(&spec.inherited_fds())?;
    let inherited = Inherited::take(spec, adopt)?;
    // Kept open (by number) for PID 1 to bind; never reaches the tool.
    let program: Option<OwnedFd> = spec.program_fd.map(adopt).transpose()?;
    for fd in inherited.all().chain(program.iter()) {
        set_cloexec(fd)?;
    }
    let maps = spec.maps_fd.map(adopt).transpose()?;
    enter_namespaces(maps)?;

    let (lifeline_r, lifeline_w) = lifeline()?;
    let pid1 = match fork_pid1()? {
        Forked::Child => {
            drop(lifeline_w);
            crate::pid1::run(spec, status, lifeline_r, inherited)
        }
        Forked::Parent(pid) => pid,
    };
    drop(lifeline_r);
    drop(inherited);
    drop(program);
    status.send(&StatusMsg::Pid1 { host_pid: pid1 });

    let deadline = Instant::now() + Duration::from_millis(spec.timeout_ms) + INIT_DEADLINE_GRACE;
    wait_for_pid1(pid1, Watch::Deadline(deadline), status)
}

/// Unshares every namespace but the mount namespace, has the ids mapped
/// (by the caller through `maps` for a root caller) and becomes the one
/// mapped id, non-dumpable, with the caller's parent-death signal re-armed.
/// `maps` is taken (and closed by the end) whatever the path, so the
/// caller never waits on a socket PID 1 still holds.
fn enter_namespaces(maps: Option<OwnedFd>) -> Result<(), SandboxError> {
    let flags = UnshareFlags::NEWUSER
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWNET
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS
        | UnshareFlags::NEWCGROUP;
    let unshare = || {
        crate::sys::unshare_namespaces(flags).map_err(|e| SandboxError::Unshare {
            flags: "CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWCGROUP".into(),
            errno: errno(e),
        })
    };
    // Credential changes below clear the parent-death signal the caller may
    // have armed (`NativeTier::die_with_caller`); remember it to re-arm.
    let death_signal = rustix::process::parent_process_death_signal().ok().flatten();
    let caller = rustix::process::getppid();
    if privileged_caller() {
        // Root outside must not be the worker's identity: drop root's
        // supplementary groups while we still may, then have the caller,
        // root in the initial user namespace, map 65534 inside to 65534
        // outside.
        rustix::thread::set_thread_groups(&[])
            .map_err(|e| SandboxError::ProcessAttr { call: "setgroups(0, [])".into(), errno: errno(e) })?;
        let maps = maps.ok_or_else(|| {
            SandboxError::Protocol("a root caller sent no socket to map the worker's ids through".into())
        })?;
        crate::id_maps::unshare_mapped_by_caller(unshare, maps)?;
    } else {
        drop(maps);
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        unshare()?;
        crate::id_maps::write_id_maps("self", uid, gid)?;
    }
    // Become the one mapped id (a no-op for an unprivileged caller; for a
    // root caller this leaves host uid 0, which is unmapped inside, so the
    // capabilities held in the new namespace are kept).
    let id = crate::worker_exec::WORKER_ID;
    rustix::thread::set_thread_res_gid(Gid::from_raw(id), Gid::from_raw(id), Gid::from_raw(id))
        .map_err(|e| SandboxError::ProcessAttr { call: format!("setresgid({id}, {id}, {id})"), errno: errno(e) })?;
    rustix::thread::set_thread_res_uid(Uid::from_raw(id), Uid::from_raw(id), Uid::from_raw(id))
        .map_err(|e| SandboxError::ProcessAttr { call: format!("setresuid({id}, {id}, {id})"), errno: errno(e) })?;
    if let Some(signal) = death_signal {
        rustix::process::set_parent_process_death_signal(Some(signal))
            .map_err(|e| SandboxError::ProcessAttr { call: "prctl(PR_SET_PDEATHSIG)".into(), errno: errno(e) })?;
        // The caller may have died while the signal was disarmed.
        if rustix::process::getppid() != caller {
            return Err(SandboxError::ProcessAttr {
                call: "getppid() after re-arming PR_SET_PDEATHSIG".into(),
                errno: OsErrno(libc::ESRCH),
            });
        }
    }
    // Only now: a non-dumpable process's /proc/self files belong to root,
    // which would stop an unprivileged init writing its own maps.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| SandboxError::ProcessAttr { call: "prctl(PR_SET_DUMPABLE, 0)".into(), errno: errno(e) })?;

    Ok(())
}

/// What ends the init's wait for PID 1 early, by killing it.
enum Watch<'a> {
    /// The call's deadline plus [`INIT_DEADLINE_GRACE`] (a cold start: the
    /// caller normally kills first; this covers a caller that died).
    Deadline(Instant),
    /// The caller's end of a warm sandbox's call channel closing: the
    /// caller is gone (a skeleton does not know its call's deadline until
    /// PID 1 reads it; the caller enforces that deadline itself).
    CallerGone(&'a OwnedFd),
}

/// Waits for PID 1 to exit (killing it when `watch` fires), reaps it and
/// reports how it ended.
fn wait_for_pid1(pid1: i32, watch: Watch<'_>, status: &StatusWriter) -> Result<i32, SandboxError> {
    let pid = Pid::from_raw(pid1).ok_or_else(|| SandboxError::Protocol("fork returned pid 0 in parent".into()))?;
    let mut deadline_kill = false;
    if let Ok(pidfd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        loop {
            let (left, channel) = match &watch {
                Watch::Deadline(deadline) => (Some(deadline.saturating_duration_since(Instant::now())), None),
                Watch::CallerGone(channel) => (None, Some(*channel)),
            };
            if left.is_some_and(|l| l.is_zero()) {
                let _ = rustix::process::pidfd_send_signal(&pidfd, Signal::KILL);
                deadline_kill = true;
                break;
            }
            let ts =
                left.map(|l| rustix::time::Timespec { tv_sec: l.as_secs() as i64, tv_nsec: l.subsec_nanos() as i64 });
            // The channel is watched for hang-up only (no POLLIN): the call
            // on it is PID 1's to read.
            let mut fds = vec![PollFd::new(&pidfd, PollFlags::IN)];
            fds.extend(channel.map(|c| PollFd::new(c, PollFlags::empty())));
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(n) if n > 0 && !fds[0].revents().is_empty() => break,
                Ok(n) if n > 0 => {
                    let _ = rustix::process::pidfd_send_signal(&pidfd, Signal::KILL);
                    break;
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        }
    }
    let (code, signal) = loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, st))) => break (st.exit_status(), st.terminating_signal()),
            Ok(None) | Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SandboxError::Wait { call: format!("waitpid({pid1}, 0)"), errno: errno(e) }),
        }
    };
    status.send(&StatusMsg::Pid1Exited { code, signal, deadline_kill });
    Ok(0)
}

/// The host uid and gid a root caller's workers run as.
pub(crate) const ROOT_CALLER_HOST_ID: u32 = 65534;

/// Is the caller root with the capabilities to map other ids?
pub(crate) fn privileged_caller() -> bool {
    use rustix::thread::CapabilitySet;
    rustix::process::geteuid().is_root()
        && rustix::thread::capabilities(None)
            .map(|c| c.effective.contains(CapabilitySet::SETUID | CapabilitySet::SETGID))
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_from_another_build_is_refused_before_anything_is_touched() {
        let spec: InitSpec = serde_json::from_value(serde_json::json!({
            "build": "0123456789abcdef0123456789abcdef",
            "argv": ["true"], "env": [], "working_dir": "/workspace", "inputs": [], "output": null,
            "image": [], "limits": crate::WorkerLimits::default(), "timeout_ms": 1000,
            "status_fd": -1,
        }))
        .unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let status = StatusWriter::new(w).unwrap();
        // No descriptor was closed and no namespace made: this process goes
        // on as before (the refusal comes before `close_fds_except`).
        let err = init(&spec, &status).unwrap_err();
        assert!(matches!(err, SandboxError::InitMismatch { .. }), "{err}");
        assert_eq!(err.kind(), crate::SandboxErrorKind::HelperMismatch);
        assert!(err.to_string().contains("airlock-sandbox-init"), "{err}");
        drop((r, status));
    }
}
