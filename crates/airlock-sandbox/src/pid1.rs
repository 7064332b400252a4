//! PID 1 of the worker's pid namespace: builds the root, forks the worker,
//! reaps everything, kills what is left, exports the output.
//!
//! PID 1 is non-dumpable, so the worker (same uid inside) cannot open
//! `/proc/1/*` or ptrace it; it ignores signals from inside the namespace
//! (the kernel's rule for a namespace init without handlers); and when it
//! exits the kernel kills whatever is left in the namespace.
#![forbid(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{WaitOptions, WaitStatus};

use crate::error::{errno, SandboxError};
use crate::mounts::{verify_retained, RetainedOutput, StagedFds};
use crate::outcome::{ExitStatusKind, OutputExport};
use crate::sys::Forked;
use crate::wire::{InitSpec, SkeletonSpec, StatusMsg, StatusWriter};

/// What PID 1 is given: the descriptors the init inherited for it, owned
/// (all close-on-exec).
pub(crate) struct Inherited {
    /// The staged inputs, in spec order.
    pub inputs: Vec<OwnedFd>,
    /// The detached mount of each input placed that way, in spec order.
    pub input_mounts: Vec<Option<OwnedFd>>,
    /// The host staging file of the output.
    pub output: Option<OwnedFd>,
    /// The detached mount of the output, when placed that way.
    pub output_mount: Option<OwnedFd>,
    /// The provided files, in spec order.
    pub provided: Vec<OwnedFd>,
    /// The worker's end of the file-system socket.
    pub fs_socket: Option<OwnedFd>,
    /// The read end of the worker's start gate.
    pub start_gate: Option<OwnedFd>,
}

impl Inherited {
    /// The descriptors `spec` names, each taken by number with `take`.
    pub(crate) fn take(
        spec: &InitSpec,
        mut take: impl FnMut(i32) -> Result<OwnedFd, SandboxError>,
    ) -> Result<Self, SandboxError> {
        Ok(Inherited {
            inputs: spec.inputs.iter().map(|i| take(i.fd)).collect::<Result<_, _>>()?,
            input_mounts: spec
                .inputs
                .iter()
                .map(|i| i.placement.mount_fd().map(&mut take).transpose())
                .collect::<Result<_, _>>()?,
            output: spec.output.as_ref().map(|o| take(o.fd)).transpose()?,
            output_mount: spec.output.as_ref().and_then(|o| o.placement.mount_fd()).map(&mut take).transpose()?,
            provided: spec.provided.iter().map(|p| take(p.fd)).collect::<Result<_, _>>()?,
            fs_socket: spec.fs_socket_fd.map(&mut take).transpose()?,
            start_gate: spec.start_gate_fd.map(&mut take).transpose()?,
        })
    }

    /// Every descriptor, for marking them close-on-exec.
    pub(crate) fn all(&self) -> impl Iterator<Item = &OwnedFd> {
        self.inputs
            .iter()
            .chain(self.input_mounts.iter().flatten())
            .chain(self.output.iter())
            .chain(self.output_mount.iter())
            .chain(self.provided.iter())
            .chain(self.fs_socket.iter())
            .chain(self.start_gate.iter())
    }
}

/// Runs PID 1. Never returns.
///
/// `lifeline` is the read end of a pipe whose only write end the init
/// holds: if it reads as hung up, the init is gone and PID 1 exits.
pub(crate) fn run(spec: &InitSpec, status: &StatusWriter, lifeline: OwnedFd, inherited: Inherited) -> ! {
    let result = enter(&lifeline).and_then(|()| {
        let skeleton = crate::mounts::build_skeleton(&spec.image)?;
        let filters = crate::seccomp::compile_worker_filters()?;
        run_call(spec, status, lifeline, inherited, skeleton, &filters)
    });
    finish(status, result)
}

/// Runs a warm sandbox's PID 1 ([`crate::warm`]): enters its mount
/// namespace and builds the skeleton of the root, then waits for the one
/// call on `channel` and runs it as a cold start would. Never returns.
pub(crate) fn run_skeleton(skel: &SkeletonSpec, status: &StatusWriter, lifeline: OwnedFd, channel: OwnedFd) -> ! {
    let result = enter(&lifeline).and_then(|()| {
        let skeleton = crate::mounts::build_skeleton(&skel.image)?;
        let filters = crate::seccomp::compile_worker_filters()?;
        // Blocks until the call comes or the caller closes the channel (a
        // skeleton discarded unused); the init's death kills us meanwhile.
        let Some((mut spec, fds)) = crate::call_channel::receive(&channel)? else { std::process::exit(0) };
        drop(channel);
        crate::wire::same_build(&spec.build)?;
        if spec.image != skel.image {
            return Err(SandboxError::Protocol(
                "the call's image is not the one its warm sandbox was built with".into(),
            ));
        }
        spec.status_fd = status.raw();
        spec.check()?;
        let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
        let inherited = Inherited::take(&spec, |n| {
            fds.iter_mut()
                .find(|fd| fd.as_ref().is_some_and(|fd| fd.as_raw_fd() == n))
                .and_then(Option::take)
                .ok_or_else(|| SandboxError::Protocol(format!("descriptor {n} was not received or named twice")))
        })?;
        run_call(&spec, status, lifeline, inherited, skeleton, &filters)
    });
    finish(status, result)
}

/// Reports how PID 1 ended and exits.
fn finish(status: &StatusWriter, result: Result<(), SandboxError>) -> ! {
    match result {
        Ok(()) => {
            status.send(&StatusMsg::Done);
            std::process::exit(0)
        }
        Err(error) => {
            status.send(&StatusMsg::SetupFailed { error });
            std::process::exit(125)
        }
    }
}

fn attr(call: &'static str) -> impl FnOnce(rustix::io::Errno) -> SandboxError {
    move |e| SandboxError::ProcessAttr { call: call.to_string(), errno: errno(e) }
}

/// PID 1's first steps: die with the init (stop now if it already died),
/// non-dumpable, a mount namespace of its own, the sandbox's host name.
fn enter(lifeline: &OwnedFd) -> Result<(), SandboxError> {
    // Die with the init; if it already died, stop now.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(attr("prctl(PR_SET_PDEATHSIG, SIGKILL)"))?;
    let mut fds = [PollFd::new(lifeline, PollFlags::IN)];
    if rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap_or(1) > 0 {
        std::process::exit(125);
    }
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(attr("prctl(PR_SET_DUMPABLE, 0)"))?;
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));

    crate::sys::unshare_namespaces(rustix::thread::UnshareFlags::NEWNS)
        .map_err(|e| SandboxError::Unshare { flags: "CLONE_NEWNS".into(), errno: errno(e) })?;
    rustix::system::sethostname(b"airlock").map_err(attr("sethostname(\"airlock\")"))
}

/// Furnishes `skeleton` with the call's files and runs the call: forks the
/// worker, reaps everything, exports the output.
fn run_call(
    spec: &InitSpec,
    status: &StatusWriter,
    lifeline: OwnedFd,
    inherited: Inherited,
    skeleton: crate::mounts::Skeleton,
    filters: &[seccompiler::BpfProgram],
) -> Result<(), SandboxError> {
    let Inherited { inputs, input_mounts, output: host_output, output_mount, provided, fs_socket, start_gate } =
        inherited;
    let host_output = host_output.map(File::from);
    let staged = StagedFds {
        inputs: inputs.into_iter().zip(input_mounts).collect(),
        output: host_output
            .as_ref()
            .map(|h| h.try_clone().map(|h| (h, output_mount)))
            .transpose()
            .map_err(|e| SandboxError::ProcessAttr { call: "dup(host output)".into(), errno: errno(e) })?,
        provided,
    };
    let built = crate::mounts::furnish(spec, skeleton, staged)?;

    let inputs: Vec<&str> = spec.inputs.iter().map(|i| i.virtual_path.as_str()).collect();
    let rules = crate::landlock::plan(
        &built.image_dirs,
        &spec.working_dir,
        &inputs,
        spec.output.as_ref().map(|o| (o.virtual_path.as_str(), o.created_by_worker)),
        spec.program_fd.is_some(),
        &spec.provided.iter().map(|p| (p.path.as_str(), p.executable)).collect::<Vec<_>>(),
    );
    let worker = match crate::sys::fork_single_threaded()
        .map_err(|e| SandboxError::Fork { role: "worker".into(), errno: errno(e) })?
    {
        Forked::Child => {
            drop(lifeline);
            drop(host_output);
            drop(built.output);
            crate::worker_exec::exec_worker(spec, &rules, filters, status, fs_socket, start_gate)
        }
        Forked::Parent(pid) => pid,
    };
    // The socket is the worker's alone: PID 1 keeps no copy, so the caller
    // sees end-of-file as soon as the worker and what it started close theirs.
    drop(fs_socket);
    drop(start_gate);

    // Reap until the worker ends (orphans re-parented to us are reaped too).
    let exit = loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, st))) if pid.as_raw_nonzero().get() == worker => match exit_of(st) {
                Some(e) => break e,
                None => continue,
            },
            Ok(_) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SandboxError::Wait { call: "wait(NULL)".into(), errno: errno(e) }),
        }
    };
    status.send(&StatusMsg::WorkerExited { exit });

    // Nothing the worker left behind may outlive it or write late.
    let mut reaped = 0u32;
    let all_reaped = loop {
        let _ = crate::sys::kill_all_but_self();
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some(_)) => reaped += 1,
            Ok(None) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::CHILD) => break true,
            Err(_) => break false,
        }
    };
    status.send(&StatusMsg::Cleanup { reaped, all_reaped });

    if let (Some(out), Some(host), Some(o)) = (built.output, host_output, spec.output.as_ref()) {
        let export = export(&out, host, o.max_bytes, &o.virtual_path)?;
        status.send(&StatusMsg::Export { export });
    }
    Ok(())
}

fn exit_of(st: WaitStatus) -> Option<ExitStatusKind> {
    if let Some(code) = st.exit_status() {
        Some(ExitStatusKind::Exited(code))
    } else {
        st.terminating_signal().map(ExitStatusKind::Signaled)
    }
}

/// Copies the retained output to the host staging file when it is still the
/// inode PID 1 created and holds at most `max_bytes`; a bound output is
/// already there, and is only checked.
fn export(out: &RetainedOutput, host: File, max_bytes: u64, virtual_path: &str) -> Result<OutputExport, SandboxError> {
    if out.bound {
        return crate::bound_output::settle(out, &host, max_bytes, virtual_path);
    }
    let opened;
    let source = match &out.file {
        Some(kept) => match verify_retained(&out.path, kept) {
            Ok(()) => kept,
            Err(why) => return Ok(OutputExport { bytes: 0, over_limit: false, refused: Some(why) }),
        },
        None => match crate::mounts::open_created(&out.path) {
            Ok(f) => {
                opened = f;
                &opened
            }
            Err(why) => return Ok(OutputExport { bytes: 0, over_limit: false, refused: Some(why) }),
        },
    };
    let fail = |call: &str| {
        let call = call.to_string();
        move |e: std::io::Error| SandboxError::Export { virtual_path: virtual_path.into(), call, errno: errno(e) }
    };
    let size = source.metadata().map_err(fail("fstat(retained output)"))?.len();
    if size > max_bytes {
        return Ok(OutputExport { bytes: 0, over_limit: true, refused: None });
    }
    // Copy at most max_bytes + 1 from the retained descriptor, in the
    // kernel (the size could only have changed if something were still
    // writing: nothing is; a copy past the bound is refused all the same).
    let off = crate::mounts::copy_in_kernel(source, &host, max_bytes.saturating_add(1))
        .map_err(fail("sendfile(host output, retained output)"))?;
    if off > max_bytes {
        host.set_len(0).map_err(fail("ftruncate(host output, 0)"))?;
        return Ok(OutputExport { bytes: 0, over_limit: true, refused: None });
    }
    host.set_len(off).map_err(fail("ftruncate(host output)"))?;
    // No fsync: the host file is private staging that the caller reads back
    // at once; what is published is a separate candidate the caller syncs.
    Ok(OutputExport { bytes: off, over_limit: false, refused: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    /// A retained output holding `len` bytes (more than one kernel step
    /// when large) and an empty host staging file.
    fn retained(len: usize) -> (tempfile::TempDir, Vec<u8>, RetainedOutput, File) {
        let dir = tempfile::tempdir().unwrap();
        let content: Vec<u8> = (0..len).map(|i| (i % 241) as u8).collect();
        let path = dir.path().join("out");
        std::fs::write(&path, &content).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let out = RetainedOutput { path: path.to_str().unwrap().to_string(), file: Some(file), bound: false };
        let host = OpenOptions::new().read(true).write(true).create_new(true).open(dir.path().join("host")).unwrap();
        (dir, content, out, host)
    }

    #[test]
    fn an_output_within_max_bytes_is_exported_exactly() {
        let (dir, content, out, host) = retained(9 << 20);
        let export = export(&out, host, content.len() as u64, "out").unwrap();
        assert_eq!((export.bytes, export.over_limit, export.refused), (content.len() as u64, false, None));
        assert_eq!(std::fs::read(dir.path().join("host")).unwrap(), content);
    }

    #[test]
    fn an_output_over_max_bytes_is_not_exported() {
        let (dir, content, out, host) = retained(9 << 20);
        let export = export(&out, host, content.len() as u64 - 1, "out").unwrap();
        assert_eq!((export.bytes, export.over_limit), (0, true));
        assert_eq!(std::fs::metadata(dir.path().join("host")).unwrap().len(), 0);
    }
}
