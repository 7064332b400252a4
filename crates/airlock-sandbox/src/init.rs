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
use crate::wire::{InitSpec, StatusMsg, StatusWriter, MAX_SPEC_BYTES};

/// The hidden `argv[1]` that turns a binary into the sandbox init.
pub const INIT_MARKER: &str = "__airlock_sandbox_init";

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

fn run_init() -> ! {
    let mut raw = Vec::new();
    let read = std::io::stdin().lock().take(MAX_SPEC_BYTES as u64 + 1).read_to_end(&mut raw);
    let spec: InitSpec = match read.ok().and_then(|_| serde_json::from_slice(&raw).ok()) {
        Some(s) if raw.len() <= MAX_SPEC_BYTES => s,
        _ => std::process::exit(EXIT_NO_SPEC),
    };
    let status = match crate::sys::adopt_inherited_fd(spec.status_fd).and_then(StatusWriter::new) {
        Ok(s) => s,
        Err(_) => std::process::exit(EXIT_NO_SPEC),
    };
    match init(&spec, &status) {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            status.send(&StatusMsg::SetupFailed { error });
            std::process::exit(125)
        }
    }
}

fn init(spec: &InitSpec, status: &StatusWriter) -> Result<i32, SandboxError> {
    if spec.build != airlock_fsproto::BUILD_FINGERPRINT {
        return Err(SandboxError::InitMismatch {
            expected: spec.build.clone(),
            found: airlock_fsproto::BUILD_FINGERPRINT.to_owned(),
        });
    }
    spec.check()?;
    // Only the descriptors the spec names survive.
    crate::sys::close_fds_except(&spec.inherited_fds())
        .map_err(|e| SandboxError::ProcessAttr { call: "close_range(3.., ~0U, 0)".into(), errno: errno(e) })?;
    let adopt = |fd: i32| {
        crate::sys::adopt_inherited_fd(fd)
            .map_err(|e| SandboxError::ProcessAttr { call: format!("fcntl({fd}, F_GETFD)"), errno: errno(e) })
    };
    let inherited = Inherited {
        inputs: spec.inputs.iter().map(|i| adopt(i.fd)).collect::<Result<_, _>>()?,
        input_mounts: spec
            .inputs
            .iter()
            .map(|i| i.placement.mount_fd().map(adopt).transpose())
            .collect::<Result<_, _>>()?,
        output: spec.output.as_ref().map(|o| adopt(o.fd)).transpose()?,
        output_mount: spec.output.as_ref().and_then(|o| o.placement.mount_fd()).map(adopt).transpose()?,
        provided: spec.provided.iter().map(|p| adopt(p.fd)).collect::<Result<_, _>>()?,
        fs_socket: spec.fs_socket_fd.map(adopt).transpose()?,
    };
    // Kept open (by number) for PID 1 to bind; never reaches the tool.
    let program: Option<OwnedFd> = spec.program_fd.map(adopt).transpose()?;
    for fd in inherited.all().chain(program.iter()) {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| SandboxError::ProcessAttr { call: "fcntl(F_SETFD, FD_CLOEXEC)".into(), errno: errno(e) })?;
    }
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
    // Taken out (and closed at the end of this step) whatever the path, so
    // the caller never waits on a socket PID 1 still holds.
    let maps = spec.maps_fd.map(adopt).transpose()?;
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

    let (lifeline_r, lifeline_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SandboxError::ProcessAttr { call: "pipe2(O_CLOEXEC)".into(), errno: errno(e) })?;
    let pid1 = match crate::sys::fork_single_threaded()
        .map_err(|e| SandboxError::Fork { role: "pid 1".into(), errno: errno(e) })?
    {
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

    // Wait for PID 1, killing it ourselves if the caller never does.
    let pid = Pid::from_raw(pid1).ok_or_else(|| SandboxError::Protocol("fork returned pid 0 in parent".into()))?;
    let deadline = Instant::now() + Duration::from_millis(spec.timeout_ms) + INIT_DEADLINE_GRACE;
    let mut deadline_kill = false;
    if let Ok(pidfd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = rustix::process::pidfd_send_signal(&pidfd, Signal::KILL);
                deadline_kill = true;
                break;
            }
            let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(n) if n > 0 => break,
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
