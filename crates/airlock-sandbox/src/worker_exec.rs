//! The worker process, between `fork` from PID 1 and `execve` of the tool:
//! drop everything, confine, exec.
//!
//! Order matters: new session and parent-death signal; default signal
//! dispositions; stdin from `/dev/null` (or the caller's pipe, with live
//! stdio); every descriptor but 0, 1, 2 (the file-system socket, moved to
//! 3, and the close-on-exec status pipe) closed; ids set to 65534; every
//! capability dropped (bounding, ambient, effective/permitted/inheritable);
//! no-new-privs; rlimits; Landlock; seccomp (it forbids some of the calls
//! above); the start gate, if any, waited for ([`crate::gate`]); then
//! `execve`.
#![forbid(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};

use rustix::process::{Resource, Rlimit};
use rustix::thread::{CapabilitySet, CapabilitySets};
use seccompiler::BpfProgram;

use crate::error::{errno, OsErrno, SandboxError};
use crate::landlock::PlannedRule;
use crate::spec::{FS_SOCKET_ENV, FS_SOCKET_FD};
use crate::wire::{InitSpec, StatusMsg, StatusWriter};

/// The worker's uid and gid inside the user namespace.
pub(crate) const WORKER_ID: u32 = 65534;

/// Defaults added to the worker's environment when the spec does not set them.
const DEFAULT_ENV: [(&str, &str); 3] = [("PATH", crate::visible::WORKER_PATH), ("HOME", "/tmp"), ("LANG", "C.UTF-8")];

/// Confines the calling (freshly forked) process and executes the tool,
/// with `fs_socket` (if any) as its descriptor [`FS_SOCKET_FD`], once
/// `start_gate` (if any) is opened.
/// Never returns: on failure it reports on the status pipe and exits 127.
pub(crate) fn exec_worker(
    spec: &InitSpec,
    rules: &[PlannedRule],
    filters: &[BpfProgram],
    status: &StatusWriter,
    fs_socket: Option<OwnedFd>,
    start_gate: Option<OwnedFd>,
) -> ! {
    let error = confine_and_exec(spec, rules, filters, status, fs_socket, start_gate);
    status.send(&StatusMsg::SetupFailed { error });
    std::process::exit(127)
}

fn attr(call: &str) -> impl FnOnce(rustix::io::Errno) -> SandboxError + '_ {
    move |e| SandboxError::ProcessAttr { call: call.to_string(), errno: errno(e) }
}

/// Empties the bounding, ambient, effective, permitted and inheritable
/// capability sets and sets `no_new_privs`, so nothing this process runs can
/// regain a capability.
pub(crate) fn drop_all_capabilities() -> Result<(), SandboxError> {
    crate::sys::drop_bounding_set().map_err(|e| SandboxError::ProcessAttr {
        call: "prctl(PR_CAPBSET_DROP, 0..=cap_last_cap)".into(),
        errno: errno(e),
    })?;
    rustix::thread::clear_ambient_capability_set().map_err(attr("prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)"))?;
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, none).map_err(attr("capset(0, {0, 0, 0})"))?;
    rustix::thread::set_no_new_privs(true).map_err(attr("prctl(PR_SET_NO_NEW_PRIVS, 1)"))
}

fn confine_and_exec(
    spec: &InitSpec,
    rules: &[PlannedRule],
    filters: &[BpfProgram],
    status: &StatusWriter,
    fs_socket: Option<OwnedFd>,
    start_gate: Option<OwnedFd>,
) -> SandboxError {
    match confine(spec, rules, filters, status, fs_socket, start_gate) {
        Ok((program, argv, envp, path)) => exec_search(&program, &argv, &envp, &path),
        Err(e) => e,
    }
}

type Prepared = (String, Vec<CString>, Vec<CString>, String);

fn confine(
    spec: &InitSpec,
    rules: &[PlannedRule],
    filters: &[BpfProgram],
    status: &StatusWriter,
    fs_socket: Option<OwnedFd>,
    start_gate: Option<OwnedFd>,
) -> Result<Prepared, SandboxError> {
    rustix::process::setsid().map_err(attr("setsid()"))?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(attr("prctl(PR_SET_PDEATHSIG, SIGKILL)"))?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(1) {
        std::process::exit(127); // PID 1 is already gone
    }
    crate::sys::reset_signals().map_err(|e| SandboxError::ProcessAttr {
        call: "signal(*, SIG_DFL); sigprocmask(SIG_SETMASK, {})".into(),
        errno: errno(e),
    })?;

    match spec.stdin_fd {
        // Live stdio: the caller's pipe is the tool's standard input.
        Some(fd) => {
            let pipe = crate::sys::adopt_inherited_fd(fd).map_err(|e| SandboxError::ProcessAttr {
                call: format!("fcntl({fd}, F_GETFD) (live stdin)"),
                errno: errno(e),
            })?;
            rustix::stdio::dup2_stdin(&pipe).map_err(attr("dup2(live stdin, 0)"))?;
            if spec.tty {
                // A session's terminal: all three streams, and the
                // controlling terminal of the session just made (setsid).
                rustix::stdio::dup2_stdout(&pipe).map_err(attr("dup2(tty, 1)"))?;
                rustix::stdio::dup2_stderr(&pipe).map_err(attr("dup2(tty, 2)"))?;
                rustix::process::ioctl_tiocsctty(&pipe).map_err(attr("ioctl(0, TIOCSCTTY, 0)"))?;
            }
        }
        None => {
            let null = rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(attr("open(\"/dev/null\", O_RDONLY)"))?;
            rustix::stdio::dup2_stdin(&null).map_err(attr("dup2(/dev/null, 0)"))?;
        }
    }
    let mut keep = vec![status.raw()];
    keep.extend(fs_socket.as_ref().map(|s| s.as_raw_fd()));
    keep.extend(start_gate.as_ref().map(|g| g.as_raw_fd()));
    crate::sys::close_fds_except(&keep)
        .map_err(|e| SandboxError::ProcessAttr { call: "close_range(3, ~0U, 0)".into(), errno: errno(e) })?;
    if let Some(sock) = fs_socket {
        move_to_fs_fd(sock)?;
    }

    let id = rustix::process::Gid::from_raw(WORKER_ID);
    rustix::thread::set_thread_res_gid(id, id, id).map_err(attr("setresgid(65534, 65534, 65534)"))?;
    let id = rustix::process::Uid::from_raw(WORKER_ID);
    rustix::thread::set_thread_res_uid(id, id, id).map_err(attr("setresuid(65534, 65534, 65534)"))?;

    drop_all_capabilities()?;

    set_rlimits(spec)?;

    let (abi, how) = crate::landlock::enforce(rules)?;

    // Everything the exec needs is built before seccomp (no allocation
    // constraints after it, but keep the filtered window small).
    let (program, argv, envp, path) = prepare_exec(spec)?;
    status.send(&StatusMsg::Confined { landlock_abi: abi, landlock_status: how.to_string() });
    crate::seccomp::install(filters)?;
    // Everything above overlapped the caller's own work before the tool's
    // start (its synced `WorkerStarted`); nothing of the tool runs before.
    // The wait is a `read` and a `close` (and, withdrawn, a status write
    // and an exit), which the filters allow: confined in full while it
    // waits, the worker only has the `execve` left once the gate opens.
    if let Some(gate) = start_gate {
        crate::gate::wait_open(gate)?;
    }
    Ok((program, argv, envp, path))
}

/// Puts the socket at [`FS_SOCKET_FD`] (free: every inherited descriptor is
/// numbered above it and everything else is closed), open across `execve`,
/// and closes the original number.
fn move_to_fs_fd(sock: OwnedFd) -> Result<(), SandboxError> {
    let call = format!("fcntl(fs socket, F_DUPFD_CLOEXEC, {FS_SOCKET_FD})");
    let moved = rustix::io::fcntl_dupfd_cloexec(&sock, FS_SOCKET_FD)
        .map_err(|e| SandboxError::ProcessAttr { call: call.clone(), errno: errno(e) })?;
    if moved.as_raw_fd() != FS_SOCKET_FD {
        return Err(SandboxError::ProcessAttr { call, errno: OsErrno(libc::EBUSY) });
    }
    rustix::io::fcntl_setfd(&moved, rustix::io::FdFlags::empty()).map_err(attr("fcntl(3, F_SETFD, 0) (fs socket)"))?;
    drop(sock);
    // Owned by the tool from here: it must stay open through execve.
    let _ = moved.into_raw_fd();
    Ok(())
}

fn set_rlimits(spec: &InitSpec) -> Result<(), SandboxError> {
    let l = &spec.limits;
    let set = |res: Resource, name: &str, soft: u64, hard: u64| -> Result<(), SandboxError> {
        // Never ask for more than the current hard limit (raising needs privilege).
        let cur = rustix::process::getrlimit(res);
        let cap = |v: u64| cur.maximum.map_or(v, |m| v.min(m));
        rustix::process::setrlimit(res, Rlimit { current: Some(cap(soft)), maximum: Some(cap(hard)) })
            .map_err(|e| SandboxError::Rlimit { resource: name.into(), value: soft, errno: errno(e) })
    };
    set(Resource::Fsize, "RLIMIT_FSIZE", l.file_size, l.file_size)?;
    set(Resource::Core, "RLIMIT_CORE", 0, 0)?;
    if let Some(n) = l.open_files {
        set(Resource::Nofile, "RLIMIT_NOFILE", n, n)?;
    }
    if let Some(n) = l.pids {
        set(Resource::Nproc, "RLIMIT_NPROC", n, n)?;
    }
    if let Some(n) = l.memory_bytes {
        set(Resource::As, "RLIMIT_AS", n, n)?;
    }
    if let Some(n) = l.cpu_seconds {
        set(Resource::Cpu, "RLIMIT_CPU", n, n.saturating_add(1))?;
    }
    Ok(())
}

/// The worker's environment: the spec's variables plus the defaults, and
/// [`FS_SOCKET_ENV`] (replacing any given value) when it has the socket.
pub(crate) fn worker_env(env: &[(String, String)], fs_socket: bool) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env.to_vec();
    if fs_socket {
        out.retain(|(k, _)| k != FS_SOCKET_ENV);
        out.push((FS_SOCKET_ENV.to_string(), FS_SOCKET_FD.to_string()));
    }
    for (k, v) in DEFAULT_ENV {
        if !out.iter().any(|(ek, _)| ek == k) {
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

fn cstring(s: &str) -> Result<CString, SandboxError> {
    CString::new(s).map_err(|_| SandboxError::InvalidSpec(format!("NUL byte in {s:?}")))
}

fn prepare_exec(spec: &InitSpec) -> Result<Prepared, SandboxError> {
    let env = worker_env(&spec.env, spec.fs_socket_fd.is_some());
    let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap_or_default();
    let argv = spec.argv.iter().map(|a| cstring(a)).collect::<Result<Vec<_>, _>>()?;
    let envp = env.iter().map(|(k, v)| cstring(&format!("{k}={v}"))).collect::<Result<Vec<_>, _>>()?;
    Ok((spec.argv[0].clone(), argv, envp, path))
}

/// `execvpe`: a program with a `/` is executed as given; otherwise each
/// `PATH` entry is tried in turn (like the C library: `EACCES` is remembered,
/// `ENOENT`/`ENOTDIR` move on, anything else stops).
fn exec_search(program: &str, argv: &[CString], envp: &[CString], path: &str) -> SandboxError {
    let fail = |e: OsErrno| SandboxError::Exec { program: program.to_string(), errno: e };
    if program.contains('/') {
        return match cstring(program) {
            Ok(p) => fail(errno(crate::sys::execve(&p, argv, envp))),
            Err(e) => e,
        };
    }
    let mut seen_eacces = false;
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let Ok(candidate) = cstring(&format!("{dir}/{program}")) else {
            continue;
        };
        let e = crate::sys::execve(&candidate, argv, envp);
        match e.raw_os_error() {
            Some(libc::EACCES) => seen_eacces = true,
            Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP) | Some(libc::ENAMETOOLONG) => {}
            _ => return fail(errno(e)),
        }
    }
    fail(OsErrno(if seen_eacces { libc::EACCES } else { libc::ENOENT }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_defaults_fill_only_the_gaps() {
        let env = worker_env(&[("HOME".into(), "/w".into()), ("X".into(), "1".into())], false);
        assert!(env.contains(&("HOME".into(), "/w".into())));
        assert!(env.contains(&("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())));
        assert!(env.contains(&("LANG".into(), "C.UTF-8".into())));
        assert_eq!(env.iter().filter(|(k, _)| k == "HOME").count(), 1);
        assert!(!env.iter().any(|(k, _)| k == FS_SOCKET_ENV));
    }

    #[test]
    fn the_fs_socket_is_named_by_its_fixed_number() {
        let env = worker_env(&[(FS_SOCKET_ENV.into(), "9".into())], true);
        let named: Vec<&str> = env.iter().filter(|(k, _)| k == FS_SOCKET_ENV).map(|(_, v)| v.as_str()).collect();
        assert_eq!(named, ["3"]);
    }
}
