//! Starting the broker from its sealed copy, with exactly its socket and
//! root handles, and holding it by pidfd until it is reaped.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};

use airlock_fsproto::{Rights, MAX_ROOTS};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::error::{errno, SandboxError};
use crate::sealed::SealedProgram;

/// `argv[0]` of the broker.
pub const BROKER_ARGV0: &str = "airlock-broker";
/// The first root's descriptor number in the broker; root `i` is `3 + i`.
pub const BROKER_FIRST_ROOT_FD: RawFd = 3;

/// Optional arguments of the broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerOptions {
    /// `--resolver VALUE` (`auto`, `openat2` or `emulated`; passed through
    /// for the broker to check): the broker's environment is empty, so
    /// `AIRLOCK_RESOLVER` reaches it only this way. Default: none (`auto`).
    pub resolver: Option<String>,
    /// `--mode OCTAL`: permission bits of the files the broker writes
    /// (default: none, `0600`).
    pub mode: Option<u32>,
    /// `--max-file-bytes N`: the largest file the broker may write (its
    /// `RLIMIT_FSIZE`); airlock passes the write budget so chunked writes
    /// fit. Default: none (one 64 KiB frame).
    pub max_file_bytes: Option<u64>,
}

/// The broker's argument vector: `airlock-broker --rights r,wl,l` (one
/// rights string per root, in order), then the options. Pure.
pub fn broker_argv(rights: &[Rights], options: &BrokerOptions) -> Vec<String> {
    let list: Vec<String> = rights.iter().map(Rights::to_string).collect();
    let mut argv = vec![BROKER_ARGV0.to_string(), "--rights".to_string(), list.join(",")];
    if let Some(r) = &options.resolver {
        argv.extend(["--resolver".to_string(), r.clone()]);
    }
    if let Some(mode) = options.mode {
        argv.extend(["--mode".to_string(), format!("{mode:04o}")]);
    }
    if let Some(n) = options.max_file_bytes {
        argv.extend(["--max-file-bytes".to_string(), n.to_string()]);
    }
    argv
}

/// A running broker, held by pidfd so a signal never reaches a reused pid.
/// Dropping it kills and reaps the broker.
#[derive(Debug)]
pub struct BrokerProcess {
    child: Child,
    pidfd: OwnedFd,
    reaped: Option<ExitStatus>,
}

fn broker_err(call: impl Into<String>) -> impl FnOnce(rustix::io::Errno) -> SandboxError {
    let call = call.into();
    move |e| SandboxError::Broker { call, errno: errno(e) }
}

/// [`spawn_broker_with`] with default options.
pub fn spawn_broker(
    program: &SealedProgram,
    socket: OwnedFd,
    roots: Vec<(OwnedFd, Rights)>,
    stderr: Stdio,
) -> Result<BrokerProcess, SandboxError> {
    spawn_broker_with(program, socket, roots, stderr, &BrokerOptions::default())
}

/// Starts the broker from the sealed `program` (executed through
/// `/proc/self/fd/N` of the sealed copy, so the bytes that were hashed are
/// the bytes that run) with an empty environment, [`broker_argv`], `socket`
/// as fd 0, `/dev/null` as fd 1, `stderr` as fd 2 and root `i` as fd `3 +
/// i`; no other descriptor survives the exec (all of the caller's are
/// close-on-exec, and the broker closes any stray one first thing).
///
/// The broker gets `SIGKILL` when the *thread* that spawned it exits
/// (`PR_SET_PDEATHSIG`): spawn it from a thread that outlives it.
pub fn spawn_broker_with(
    program: &SealedProgram,
    socket: OwnedFd,
    roots: Vec<(OwnedFd, Rights)>,
    stderr: Stdio,
    options: &BrokerOptions,
) -> Result<BrokerProcess, SandboxError> {
    if roots.is_empty() || roots.len() > MAX_ROOTS {
        return Err(SandboxError::InvalidSpec(format!("a broker holds 1 to {MAX_ROOTS} roots, not {}", roots.len())));
    }
    if let Some((i, _)) = roots.iter().enumerate().find(|(_, (_, r))| !(r.read || r.write || r.list)) {
        return Err(SandboxError::InvalidSpec(format!("root {i} has no rights")));
    }
    // Every descriptor is first duplicated above the targets 3..3+n, so the
    // child's dup2 onto 3+i can never overwrite a source (or the program).
    let floor = BROKER_FIRST_ROOT_FD + roots.len() as RawFd;
    let high = |fd: BorrowedFd<'_>, what: &str| {
        rustix::io::fcntl_dupfd_cloexec(fd, floor)
            .map_err(broker_err(format!("fcntl({what}, F_DUPFD_CLOEXEC, {floor})")))
    };
    let exe = high(program.as_fd(), "sealed program")?;
    let mut held = Vec::with_capacity(roots.len());
    let mut moves = Vec::with_capacity(roots.len());
    for (i, (fd, _)) in roots.iter().enumerate() {
        let dup = high(fd.as_fd(), &format!("root {i}"))?;
        moves.push((dup.as_raw_fd(), BROKER_FIRST_ROOT_FD + i as RawFd));
        held.push(dup);
    }
    let rights: Vec<Rights> = roots.iter().map(|(_, r)| *r).collect();
    let argv = broker_argv(&rights, options);
    let exe_path = format!("/proc/self/fd/{}", exe.as_raw_fd());

    let mut cmd = Command::new(&exe_path);
    cmd.arg0(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(socket))
        .stdout(Stdio::null())
        .stderr(stderr);
    crate::sys::move_fds_at_exec(&mut cmd, moves)
        .map_err(|e| SandboxError::Broker { call: "arrange root descriptors 3..".into(), errno: errno(e) })?;
    crate::sys::die_with_parent_at_exec(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| SandboxError::Broker { call: format!("spawn({exe_path:?}, {argv:?})"), errno: errno(e) })?;
    // The parent's copies: the socket's broker end (inside `cmd`), the root
    // duplicates and the program's.
    drop(cmd);
    drop((exe, held, roots));
    let pid = Pid::from_raw(child.id() as i32);
    let pidfd = match pid.map(|p| rustix::process::pidfd_open(p, PidfdFlags::empty())) {
        Some(Ok(fd)) => fd,
        failed => {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            let e = match failed {
                Some(Err(e)) => e,
                _ => rustix::io::Errno::SRCH,
            };
            return Err(broker_err(format!("pidfd_open({})", child.id()))(e));
        }
    };
    Ok(BrokerProcess { child, pidfd, reaped: None })
}

impl BrokerProcess {
    /// The broker's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The pidfd (readable when the broker has exited; poll it to notice a
    /// dead broker).
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Sends `SIGKILL` through the pidfd (a no-op once it has exited).
    pub fn kill(&self) -> Result<(), SandboxError> {
        if self.reaped.is_some() {
            return Ok(());
        }
        match rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(broker_err(format!("pidfd_send_signal({}, SIGKILL)", self.id()))(e)),
        }
    }

    /// Waits for the broker to exit and reaps it.
    pub fn wait(&mut self) -> Result<ExitStatus, SandboxError> {
        if let Some(status) = self.reaped {
            return Ok(status);
        }
        let status = self
            .child
            .wait()
            .map_err(|e| SandboxError::Wait { call: format!("waitpid({}, 0)", self.id()), errno: errno(e) })?;
        self.reaped = Some(status);
        Ok(status)
    }

    /// The exit status if the broker has exited (reaping it), else `None`.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, SandboxError> {
        if let Some(status) = self.reaped {
            return Ok(Some(status));
        }
        let status = self
            .child
            .try_wait()
            .map_err(|e| SandboxError::Wait { call: format!("waitpid({}, WNOHANG)", self.id()), errno: errno(e) })?;
        self.reaped = status;
        Ok(status)
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            let _ = self.kill();
            let _ = self.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_has_one_rights_string_per_root_in_order() {
        let r = |s| Rights::parse(s).unwrap();
        assert_eq!(
            broker_argv(&[r("r"), r("wl"), r("l")], &BrokerOptions::default()),
            ["airlock-broker", "--rights", "r,wl,l"]
        );
        let options = BrokerOptions { resolver: Some("emulated".into()), mode: None, max_file_bytes: Some(1 << 20) };
        assert_eq!(
            broker_argv(&[r("lrw")], &options),
            ["airlock-broker", "--rights", "rwl", "--resolver", "emulated", "--max-file-bytes", "1048576"]
        );
    }
}
