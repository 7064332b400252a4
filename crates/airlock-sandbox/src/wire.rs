//! The messages between the caller and the sandbox init: the spec it reads
//! on stdin (one JSON document, then EOF) and the status records it writes
//! on its status pipe (one JSON object a line, each shorter than `PIPE_BUF`
//! so that lines from the init and its PID 1 never interleave).
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::outcome::{ExitStatusKind, OutputExport};
use crate::placement::Placement;
use crate::spec::{ImageMount, SpecShape, WorkerLimits, FS_SOCKET_FD};

/// The most spec bytes the init reads.
pub(crate) const MAX_SPEC_BYTES: usize = 4 << 20;
/// The most status bytes the caller reads.
pub(crate) const MAX_STATUS_BYTES: usize = 1 << 20;

/// The first slot number of a warm sandbox's call ([`crate::call_channel`]):
/// far above any descriptor a process holds, so a slot is never mistaken
/// for a descriptor.
pub(crate) const CALL_SLOT_BASE: i32 = 1 << 24;

/// Refuses a spec sent by another build ([`SandboxError::InitMismatch`]).
pub(crate) fn same_build(build: &str) -> Result<(), SandboxError> {
    if build != airlock_fsproto::BUILD_FINGERPRINT {
        return Err(SandboxError::InitMismatch {
            expected: build.to_owned(),
            found: airlock_fsproto::BUILD_FINGERPRINT.to_owned(),
        });
    }
    Ok(())
}

/// An input as the init sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct InitInput {
    pub virtual_path: String,
    pub fd: i32,
    pub bytes: u64,
    /// Bound or copied.
    #[serde(default)]
    pub placement: Placement,
}

/// The output as the init sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct InitOutput {
    pub virtual_path: String,
    pub fd: i32,
    pub max_bytes: u64,
    /// The worker creates the file itself (see `NativeTier::worker_creates_output`).
    #[serde(default)]
    pub created_by_worker: bool,
    /// Bound or copied (and then exported); always a copy when the worker
    /// creates the file.
    #[serde(default)]
    pub placement: Placement,
}

/// A provided file as the init sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct InitProvided {
    /// Absolute path inside the worker, beneath `/.airlock`.
    pub path: String,
    pub fd: i32,
    pub bytes: u64,
    pub executable: bool,
}

/// The spec as sent to the init.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct InitSpec {
    /// The build fingerprint of the airlock that sent it
    /// ([`airlock_fsproto::BUILD_FINGERPRINT`]): an init of another build
    /// refuses the spec.
    pub build: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub inputs: Vec<InitInput>,
    pub output: Option<InitOutput>,
    pub image: Vec<ImageMount>,
    pub limits: WorkerLimits,
    pub timeout_ms: u64,
    /// The status pipe's write end, inherited by the init.
    pub status_fd: i32,
    /// A program to bind read-only and executable at
    /// [`PROGRAM_PATH`](crate::spec::PROGRAM_PATH), inherited by the init.
    #[serde(default)]
    pub program_fd: Option<i32>,
    /// With live stdio: the read end of the caller's pipe, which becomes the
    /// worker's standard input (otherwise it reads `/dev/null`).
    #[serde(default)]
    pub stdin_fd: Option<i32>,
    /// `stdin_fd` is a terminal (a pty's slave): it becomes the worker's
    /// standard input, output and error and its controlling terminal.
    #[serde(default)]
    pub tty: bool,
    /// Files to copy under `/.airlock`, inherited by the init.
    #[serde(default)]
    pub provided: Vec<InitProvided>,
    /// The socket that becomes the worker's descriptor
    /// [`FS_SOCKET_FD`](crate::spec::FS_SOCKET_FD), inherited by the init.
    #[serde(default)]
    pub fs_socket_fd: Option<i32>,
    /// The read end of the worker's start gate ([`crate::gate`]), inherited
    /// by the init and held by the worker alone until it executes the tool.
    #[serde(default)]
    pub start_gate_fd: Option<i32>,
    /// A root caller's end of the id-map exchange ([`crate::id_maps`]),
    /// inherited by the init and closed once it is mapped.
    #[serde(default)]
    pub maps_fd: Option<i32>,
}

impl InitSpec {
    /// Bytes of the call's files on the worker's root tmpfs: the copied
    /// inputs and provided files, and room for a copied output (its bound,
    /// or the file-size limit if larger, plus the one byte that shows an
    /// overrun); a bound file takes none. tmpfs pages are charged to the
    /// worker's cgroup, so its memory limit is raised by this much.
    pub(crate) fn files_bytes(&self) -> u64 {
        let inputs = self.inputs.iter().filter(|i| i.placement.copies()).map(|i| i.bytes);
        let copied = inputs.chain(self.provided.iter().map(|p| p.bytes));
        let output = self
            .output
            .as_ref()
            .filter(|o| o.placement.copies())
            .map_or(0, |o| o.max_bytes.max(self.limits.file_size).saturating_add(1));
        copied.fold(output, u64::saturating_add)
    }

    /// Re-runs the shape checks inside the init (it trusts nothing it reads).
    pub(crate) fn check(&self) -> Result<(), SandboxError> {
        let image = self
            .image
            .iter()
            .map(|m| m.path.to_str().ok_or_else(|| SandboxError::InvalidSpec("image path is not UTF-8".into())))
            .collect::<Result<Vec<_>, _>>()?;
        let mut files: Vec<&str> = self.inputs.iter().map(|i| i.virtual_path.as_str()).collect();
        for i in &self.inputs {
            i.placement.check()?;
        }
        if let Some(o) = &self.output {
            files.push(&o.virtual_path);
            o.placement.check()?;
            if o.created_by_worker && !o.placement.copies() {
                return Err(SandboxError::InvalidSpec("an output the worker creates cannot be bound".into()));
            }
        }
        SpecShape {
            argv: &self.argv,
            env: &self.env,
            working_dir: &self.working_dir,
            image,
            files,
            provided: self.provided.iter().map(|p| p.path.as_str()).collect(),
            file_size: self.limits.file_size,
        }
        .check()?;
        // The socket's number in the worker is kept free all the way down.
        let fds = self.inherited_fds();
        for (i, fd) in fds.iter().enumerate() {
            if *fd <= FS_SOCKET_FD || fds[i + 1..].contains(fd) {
                return Err(SandboxError::Protocol(format!("inherited fd {fd} is reserved or repeated")));
            }
        }
        Ok(())
    }

    /// Puts the descriptors a warm sandbox received in place of the slots
    /// the call names ([`crate::call_channel`]), each first renumbered above
    /// [`FS_SOCKET_FD`]; every descriptor received must fill exactly one
    /// slot. A call cannot carry what only a cold start can pass (live
    /// stdin, a terminal, id maps). Returns the renumbered descriptors;
    /// [`InitSpec::check`] still runs afterwards.
    pub(crate) fn resolve_slots(
        &mut self,
        received: Vec<std::os::fd::OwnedFd>,
    ) -> Result<Vec<std::os::fd::OwnedFd>, SandboxError> {
        use std::os::fd::AsRawFd;
        if self.stdin_fd.is_some() || self.tty || self.maps_fd.is_some() {
            return Err(SandboxError::Protocol(
                "a warm sandbox's call named a descriptor only a cold start passes".into(),
            ));
        }
        let placed = received
            .iter()
            .map(|fd| rustix::io::fcntl_dupfd_cloexec(fd, FS_SOCKET_FD + 1))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SandboxError::Descriptor {
                call: format!("fcntl(F_DUPFD_CLOEXEC, {})", FS_SOCKET_FD + 1),
                errno: crate::error::errno(e),
            })?;
        drop(received);
        let mut used = 0usize;
        let mut fill = |slot: &mut i32| -> Result<(), SandboxError> {
            let index = slot.checked_sub(CALL_SLOT_BASE).and_then(|i| usize::try_from(i).ok());
            let fd = index.and_then(|i| placed.get(i)).ok_or_else(|| {
                SandboxError::Protocol(format!("slot {slot} names no descriptor of the {} received", placed.len()))
            })?;
            *slot = fd.as_raw_fd();
            used += 1;
            Ok(())
        };
        for i in &mut self.inputs {
            fill(&mut i.fd)?;
            if let Some(m) = i.placement.mount_fd_mut() {
                fill(m)?;
            }
        }
        if let Some(o) = &mut self.output {
            fill(&mut o.fd)?;
            if let Some(m) = o.placement.mount_fd_mut() {
                fill(m)?;
            }
        }
        for p in &mut self.provided {
            fill(&mut p.fd)?;
        }
        if let Some(p) = &mut self.program_fd {
            fill(p)?;
        }
        if let Some(s) = &mut self.fs_socket_fd {
            fill(s)?;
        }
        if let Some(g) = &mut self.start_gate_fd {
            fill(g)?;
        }
        if used != placed.len() {
            return Err(SandboxError::Protocol(format!(
                "the call named {used} descriptors and {} were received",
                placed.len()
            )));
        }
        Ok(placed)
    }

    /// Every descriptor the init inherits on purpose.
    pub(crate) fn inherited_fds(&self) -> Vec<i32> {
        let mut fds = vec![self.status_fd];
        fds.extend(self.stdin_fd);
        fds.extend(self.output.iter().flat_map(|o| [Some(o.fd), o.placement.mount_fd()]).flatten());
        fds.extend(self.inputs.iter().flat_map(|i| [Some(i.fd), i.placement.mount_fd()]).flatten());
        fds.extend(self.program_fd);
        fds.extend(self.provided.iter().map(|p| p.fd));
        fds.extend(self.fs_socket_fd);
        fds.extend(self.start_gate_fd);
        fds.extend(self.maps_fd);
        fds
    }
}

/// What a warm sandbox's init reads on stdin ([`crate::warm`]): only what
/// every call of its tier shares. The call itself comes later, on the call
/// channel, as an [`InitSpec`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SkeletonSpec {
    /// As [`InitSpec::build`].
    pub build: String,
    /// The image directories every call of this skeleton gets.
    pub image: Vec<ImageMount>,
    /// The status pipe's write end, inherited by the init.
    pub status_fd: i32,
    /// The skeleton's end of the call channel, inherited by the init.
    pub call_fd: i32,
    /// As [`InitSpec::maps_fd`].
    #[serde(default)]
    pub maps_fd: Option<i32>,
}

impl SkeletonSpec {
    /// Re-runs the shape checks inside the init.
    pub(crate) fn check(&self) -> Result<(), SandboxError> {
        for m in &self.image {
            let path = m.path.to_str().ok_or_else(|| SandboxError::InvalidSpec("image path is not UTF-8".into()))?;
            if !path.starts_with('/') || path.contains('\0') {
                return Err(SandboxError::InvalidSpec(format!("image path {path:?} is not absolute")));
            }
        }
        let fds = self.inherited_fds();
        for (i, fd) in fds.iter().enumerate() {
            if *fd <= FS_SOCKET_FD || fds[i + 1..].contains(fd) {
                return Err(SandboxError::Protocol(format!("inherited fd {fd} is reserved or repeated")));
            }
        }
        Ok(())
    }

    /// Every descriptor the init inherits on purpose.
    pub(crate) fn inherited_fds(&self) -> Vec<i32> {
        let mut fds = vec![self.status_fd, self.call_fd];
        fds.extend(self.maps_fd);
        fds
    }
}

/// One status record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum StatusMsg {
    /// From the init: PID 1 of the new pid namespace has this pid outside it.
    Pid1 { host_pid: i32 },
    /// From any stage: setup failed; nothing ran (or the tool could not be executed).
    SetupFailed { error: SandboxError },
    /// From the worker, just before `execve`: how it is confined.
    Confined { landlock_abi: i32, landlock_status: String },
    /// From PID 1: the worker ended.
    WorkerExited { exit: ExitStatusKind },
    /// From PID 1: every other process of the namespace was killed and reaped.
    Cleanup { reaped: u32, all_reaped: bool },
    /// From PID 1: the export result.
    Export { export: OutputExport },
    /// From PID 1: its last record.
    Done,
    /// From the init: PID 1 is gone (killed on the init's own deadline when `deadline_kill`).
    Pid1Exited { code: Option<i32>, signal: Option<i32>, deadline_kill: bool },
}

impl StatusMsg {
    /// One line of JSON, cut to stay under `PIPE_BUF` (errors are the only
    /// records that can be long; their messages are shortened).
    pub(crate) fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        if line.len() >= 4000 {
            let short = StatusMsg::SetupFailed {
                error: SandboxError::Protocol(format!("status record too long ({} bytes)", line.len())),
            };
            line = serde_json::to_vec(&short).unwrap_or_default();
        }
        line.push(b'\n');
        line
    }
}

/// The write end of the status pipe, as the init, PID 1 and the worker
/// (until `execve`, where it closes) hold it.
pub(crate) struct StatusWriter {
    fd: std::os::fd::OwnedFd,
}

impl StatusWriter {
    /// Wraps the inherited write end and marks it close-on-exec, so it never
    /// reaches the tool.
    pub(crate) fn new(fd: std::os::fd::OwnedFd) -> std::io::Result<Self> {
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
        Ok(StatusWriter { fd })
    }

    /// The descriptor number (to keep it open across `close_range`).
    pub(crate) fn raw(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// Sends one record with a single `write(2)` (atomic: shorter than
    /// `PIPE_BUF`). A caller that went away is not an error here.
    pub(crate) fn send(&self, msg: &StatusMsg) {
        let line = msg.to_line();
        let _ = rustix::io::write(&self.fd, &line);
    }
}

/// The prefix of a cold init's `argv[2]` when it must die with the thread
/// that started it: `die-with=PID`, the caller's pid. The caller spawns it
/// with `posix_spawn`, which runs nothing between fork and exec, so the init
/// arms `PR_SET_PDEATHSIG` itself before anything else and exits if its
/// parent is no longer that process (it died in between).
pub(crate) const DIE_WITH_PREFIX: &str = "die-with=";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_round_trip() {
        let msgs = [
            StatusMsg::Pid1 { host_pid: 42 },
            StatusMsg::WorkerExited { exit: ExitStatusKind::Signaled(9) },
            StatusMsg::Export { export: OutputExport { bytes: 3, over_limit: false, refused: None } },
            StatusMsg::Done,
        ];
        for m in msgs {
            let line = m.to_line();
            assert_eq!(*line.last().unwrap(), b'\n');
            let back: StatusMsg = serde_json::from_slice(&line[..line.len() - 1]).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn long_records_stay_atomic() {
        let m = StatusMsg::SetupFailed { error: SandboxError::Landlock("x".repeat(10_000)) };
        assert!(m.to_line().len() < 4096);
    }
}
