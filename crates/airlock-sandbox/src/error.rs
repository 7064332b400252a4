//! The sandbox's error: one variant per privileged step, each printing the
//! call it made and that call's arguments.
//!
//! Errors raised inside the init travel to the caller over the status pipe,
//! so the type is plain data (serde) with the OS error kept as its number.
#![forbid(unsafe_code)]

use std::fmt;

use serde::{Deserialize, Serialize};

/// An OS error number (`errno`), printed the way `std::io::Error` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsErrno(pub i32);

impl OsErrno {
    /// The errno of an `std::io::Error` (`EIO` when it carries none).
    pub fn of(err: &std::io::Error) -> Self {
        OsErrno(err.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The last OS error of the calling thread.
    pub fn last() -> Self {
        Self::of(&std::io::Error::last_os_error())
    }
}

impl From<rustix::io::Errno> for OsErrno {
    fn from(e: rustix::io::Errno) -> Self {
        OsErrno(e.raw_os_error())
    }
}

impl From<std::io::Error> for OsErrno {
    fn from(e: std::io::Error) -> Self {
        Self::of(&e)
    }
}

impl fmt::Display for OsErrno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// What went wrong while starting, confining, waiting for or cleaning up a
/// worker.
///
/// Each privileged step has its own variant whose message names the call and
/// its arguments, e.g. `pivot_root(".", ".")`. [`SandboxError::kind`]
/// gives what programs decide on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The worker spec is malformed (the caller's bug, found before anything ran).
    #[error("invalid worker spec: {0}")]
    InvalidSpec(String),
    /// The host lacks something the tier needs (user namespaces, Landlock, …).
    #[error("sandbox unavailable on this host: {0}")]
    Unavailable(String),
    /// Real memory and process limits (a delegated cgroup v2) were required
    /// ([`NativeTier::require_cgroup`](crate::NativeTier::require_cgroup))
    /// and cannot be had; nothing was started.
    #[error("memory and process limits through a cgroup were required and are not available: {0}")]
    LimitsUnavailable(String),
    /// Creating a pipe or duplicating a descriptor in the caller failed.
    #[error("{call}: {errno}")]
    Descriptor {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// The sandbox init is from another build than the airlock that
    /// started it (an `airlock-sandbox-init` left from another install).
    #[error(
        "the sandbox init is from another airlock build (airlock is build {expected}, the init build {found}): \
         install the airlock-sandbox-init built with this airlock beside it, or remove it (airlock is then its own init)"
    )]
    InitMismatch {
        /// The build of the airlock that sent the spec.
        expected: String,
        /// The init's build.
        found: String,
    },
    /// Spawning the sandbox init failed.
    #[error("spawn({program:?}, [\"__airlock_sandbox_init\"]): {errno}")]
    SpawnInit {
        /// The init program.
        program: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// `unshare(2)` of the namespaces failed.
    #[error("unshare({flags}): {errno}")]
    Unshare {
        /// The flags, spelled out.
        flags: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Writing a user-namespace map file failed.
    #[error("write({file:?}, {line:?}): {errno}")]
    UidMap {
        /// `/proc/self/uid_map`, `/proc/self/gid_map` or `/proc/self/setgroups`.
        file: String,
        /// What was written.
        line: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// `fork(2)` failed.
    #[error("fork() of the {role}: {errno}")]
    Fork {
        /// Which process was being made (`pid 1`, `worker`).
        role: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// `mount(NULL, "/", NULL, MS_REC|MS_PRIVATE, NULL)` failed.
    #[error("mount(NULL, \"/\", NULL, MS_REC|MS_PRIVATE, NULL): {errno}")]
    MountPropagation {
        /// The OS error.
        errno: OsErrno,
    },
    /// Mounting a tmpfs failed.
    #[error("mount(\"tmpfs\", {target:?}, \"tmpfs\", {flags}, {options:?}): {errno}")]
    MountTmpfs {
        /// Where.
        target: String,
        /// Mount flags, spelled out.
        flags: String,
        /// The tmpfs options.
        options: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Mounting proc failed.
    #[error("mount(\"proc\", {target:?}, \"proc\", MS_NOSUID|MS_NODEV|MS_NOEXEC, NULL): {errno}")]
    MountProc {
        /// Where.
        target: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// A bind mount failed.
    #[error("mount({source_path:?}, {target:?}, NULL, {flags}, NULL): {errno}")]
    BindMount {
        /// The bound path.
        source_path: String,
        /// Where it was bound.
        target: String,
        /// Mount flags, spelled out.
        flags: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Making a mount read-only (remount or `mount_setattr`) failed.
    #[error("{call}: {errno}")]
    Remount {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Building the root's files and directories (mkdir, symlink, write) failed.
    #[error("{call}: {errno}")]
    BuildRoot {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Copying a staged input into the worker's root failed.
    #[error("stage input {virtual_path:?} (copy from fd {fd}): {errno}")]
    StageInput {
        /// The input's virtual path.
        virtual_path: String,
        /// The inherited descriptor.
        fd: i32,
        /// The OS error.
        errno: OsErrno,
    },
    /// `pivot_root(".", ".")` failed.
    #[error("pivot_root(\".\", \".\") into {new_root:?}: {errno}")]
    PivotRoot {
        /// The new root (before pivoting).
        new_root: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// `umount2(".", MNT_DETACH)` of the old root failed.
    #[error("umount2(\".\", MNT_DETACH) of the old root: {errno}")]
    UmountOldRoot {
        /// The OS error.
        errno: OsErrno,
    },
    /// `chdir(2)` failed.
    #[error("chdir({path:?}): {errno}")]
    Chdir {
        /// Where.
        path: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// A process-attribute call (`prctl`, `setsid`, `setres[ug]id`, `capset`,
    /// `sethostname`, `close_range`, `dup2`) failed.
    #[error("{call}: {errno}")]
    ProcessAttr {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// `setrlimit(2)` failed.
    #[error("setrlimit({resource}, {value}): {errno}")]
    Rlimit {
        /// The resource name, e.g. `RLIMIT_FSIZE`.
        resource: String,
        /// The limit.
        value: u64,
        /// The OS error.
        errno: OsErrno,
    },
    /// Building or applying the Landlock ruleset failed, or the kernel did
    /// not enforce it.
    #[error("landlock: {0}")]
    Landlock(String),
    /// Building or installing the seccomp filter failed.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// `execve(2)` of the tool failed.
    #[error("execve({program:?}, …): {errno}")]
    Exec {
        /// The program (argv\[0\]).
        program: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Waiting for, signalling or polling the sandbox processes failed.
    #[error("{call}: {errno}")]
    Wait {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// Copying the output out of the sandbox failed (an I/O error, not a refusal).
    #[error("export output {virtual_path:?}: {call}: {errno}")]
    Export {
        /// The output's virtual path.
        virtual_path: String,
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// The init and the caller disagree about the status protocol, or the
    /// init died without saying why.
    #[error("sandbox init protocol: {0}")]
    Protocol(String),
    /// The caller closed the worker's start gate unopened
    /// ([`WorkerSpec::start_gate`](crate::WorkerSpec::start_gate)): the
    /// worker exited before executing anything.
    #[error("the caller withdrew the start before the tool was executed")]
    StartWithdrawn,
    /// Copying or sealing a program in memory failed ([`crate::SealedProgram`]).
    #[error("seal program: {call}: {errno}")]
    Sealed {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// A sealed program's SHA-256 is not the approved one.
    #[error("program {program:?} has SHA-256 {actual}, not the approved {expected:?}")]
    DigestMismatch {
        /// The program's name.
        program: String,
        /// The approved digest, as given.
        expected: String,
        /// The digest of the sealed copy.
        actual: String,
    },
    /// A container engine (the Docker tier's daemon) refused or failed a request.
    #[error("container engine: {call}: {message}")]
    ContainerEngine {
        /// The request, e.g. `POST /containers/create`.
        call: String,
        /// What the engine answered.
        message: String,
    },
    /// Starting or stopping the broker process failed.
    #[error("broker: {call}: {errno}")]
    Broker {
        /// The call, with its arguments.
        call: String,
        /// The OS error.
        errno: OsErrno,
    },
    /// A microVM's guest did not say hello within the boot deadline; the VM
    /// was killed.
    #[error(
        "the microVM guest did not answer within {waited_ms} ms of boot ({console}); raise [sandbox.microvm] \
         boot_timeout_ms, or check the kernel and initramfs"
    )]
    BootTimeout {
        /// The boot deadline.
        waited_ms: u64,
        /// The tail of the guest console and of the VMM's messages.
        console: String,
    },
    /// A microVM's guest speaks another protocol version or is another
    /// airlock build; the VM was killed.
    #[error(
        "the microVM guest speaks protocol {protocol} with build fingerprint {fingerprint:?}, but this airlock \
         speaks {expected_protocol} and is build {expected_fingerprint:?}; rebuild the guest with \
         scripts/microvm-build.sh from this airlock binary"
    )]
    GuestMismatch {
        /// The guest's protocol version.
        protocol: u32,
        /// The guest's build fingerprint.
        fingerprint: String,
        /// This airlock's protocol version.
        expected_protocol: u32,
        /// This airlock's build fingerprint.
        expected_fingerprint: String,
    },
}

/// What kind of failure a [`SandboxError`] is, for programs: the caller
/// decides what to report from this, never from the message.
///
/// [`SandboxErrorKind::as_str`] is the stable dotted code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SandboxErrorKind {
    /// `sandbox.invalid_spec`: the worker spec is malformed.
    InvalidSpec,
    /// `sandbox.unavailable`: the host cannot run this tier (including a
    /// user namespace the host refuses).
    Unavailable,
    /// `sandbox.limits_unavailable`: a cgroup was required and is not delegated.
    LimitsUnavailable,
    /// `worker.exec_failed`: the tool's program could not be executed.
    ExecFailed,
    /// `broker.digest_mismatch`: a sealed program is not the pinned one.
    DigestMismatch,
    /// `broker.unavailable`: a program could not be sealed, or the broker
    /// not started or signalled.
    BrokerUnavailable,
    /// `sandbox.boot_timeout`: a microVM's guest did not answer in time.
    BootTimeout,
    /// `sandbox.guest_mismatch`: a microVM's guest is another version or build.
    GuestMismatch,
    /// `helper.mismatch`: the sandbox init is from another build.
    HelperMismatch,
    /// `sandbox.setup_failed`: any other step of starting, confining,
    /// waiting for or cleaning up a worker.
    SetupFailed,
}

impl SandboxErrorKind {
    /// Every kind.
    pub const ALL: &'static [SandboxErrorKind] = &[
        SandboxErrorKind::InvalidSpec,
        SandboxErrorKind::Unavailable,
        SandboxErrorKind::LimitsUnavailable,
        SandboxErrorKind::ExecFailed,
        SandboxErrorKind::DigestMismatch,
        SandboxErrorKind::BrokerUnavailable,
        SandboxErrorKind::SetupFailed,
        SandboxErrorKind::BootTimeout,
        SandboxErrorKind::GuestMismatch,
        SandboxErrorKind::HelperMismatch,
    ];

    /// The stable dotted code, e.g. `sandbox.unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxErrorKind::InvalidSpec => "sandbox.invalid_spec",
            SandboxErrorKind::Unavailable => "sandbox.unavailable",
            SandboxErrorKind::LimitsUnavailable => "sandbox.limits_unavailable",
            SandboxErrorKind::ExecFailed => "worker.exec_failed",
            SandboxErrorKind::DigestMismatch => "broker.digest_mismatch",
            SandboxErrorKind::BrokerUnavailable => "broker.unavailable",
            SandboxErrorKind::SetupFailed => "sandbox.setup_failed",
            SandboxErrorKind::BootTimeout => "sandbox.boot_timeout",
            SandboxErrorKind::GuestMismatch => "sandbox.guest_mismatch",
            SandboxErrorKind::HelperMismatch => "helper.mismatch",
        }
    }
}

impl fmt::Display for SandboxErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SandboxError {
    /// What kind of failure this is (see [`SandboxErrorKind`]).
    ///
    /// Every variant is named here, so a new one must choose its kind.
    pub fn kind(&self) -> SandboxErrorKind {
        use SandboxErrorKind as K;
        match self {
            SandboxError::InvalidSpec(_) => K::InvalidSpec,
            SandboxError::Unavailable(_) => K::Unavailable,
            SandboxError::LimitsUnavailable(_) => K::LimitsUnavailable,
            // A refused user namespace is the host saying no, not a bug.
            SandboxError::Unshare { errno, .. } | SandboxError::UidMap { errno, .. } if host_refused(*errno) => {
                K::Unavailable
            }
            SandboxError::Exec { .. } => K::ExecFailed,
            SandboxError::DigestMismatch { .. } => K::DigestMismatch,
            SandboxError::BootTimeout { .. } => K::BootTimeout,
            SandboxError::GuestMismatch { .. } => K::GuestMismatch,
            SandboxError::InitMismatch { .. } => K::HelperMismatch,
            SandboxError::Sealed { .. } | SandboxError::Broker { .. } => K::BrokerUnavailable,
            SandboxError::Descriptor { .. }
            | SandboxError::SpawnInit { .. }
            | SandboxError::Unshare { .. }
            | SandboxError::UidMap { .. }
            | SandboxError::Fork { .. }
            | SandboxError::MountPropagation { .. }
            | SandboxError::MountTmpfs { .. }
            | SandboxError::MountProc { .. }
            | SandboxError::BindMount { .. }
            | SandboxError::Remount { .. }
            | SandboxError::BuildRoot { .. }
            | SandboxError::StageInput { .. }
            | SandboxError::PivotRoot { .. }
            | SandboxError::UmountOldRoot { .. }
            | SandboxError::Chdir { .. }
            | SandboxError::ProcessAttr { .. }
            | SandboxError::Rlimit { .. }
            | SandboxError::Landlock(_)
            | SandboxError::Seccomp(_)
            | SandboxError::Wait { .. }
            | SandboxError::Export { .. }
            | SandboxError::ContainerEngine { .. }
            | SandboxError::Protocol(_)
            | SandboxError::StartWithdrawn => K::SetupFailed,
        }
    }
}

/// Whether a failed `unshare`/map write is the host refusing user
/// namespaces (rather than a fault of ours).
fn host_refused(errno: OsErrno) -> bool {
    matches!(errno.0, libc::EPERM | libc::EACCES | libc::ENOSPC | libc::EINVAL | libc::ENOSYS)
}

/// Shorthand for building an error from an `io::Error` or `Errno`.
pub(crate) fn errno(e: impl Into<OsErrno>) -> OsErrno {
    e.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_call_and_arguments() {
        let e = SandboxError::BindMount {
            source_path: "/usr".into(),
            target: "/mnt/usr".into(),
            flags: "MS_BIND|MS_REC".into(),
            errno: OsErrno(libc::EPERM),
        };
        let text = e.to_string();
        assert!(text.starts_with("mount(\"/usr\", \"/mnt/usr\", NULL, MS_BIND|MS_REC, NULL): "), "{text}");
        assert!(text.contains("os error 1"), "{text}");
        assert_eq!(e.kind(), SandboxErrorKind::SetupFailed);
    }

    #[test]
    fn sealing_and_broker_errors_use_the_broker_codes() {
        let e = SandboxError::DigestMismatch { program: "b".into(), expected: "0".into(), actual: "1".into() };
        assert_eq!(e.kind(), SandboxErrorKind::DigestMismatch);
        let e = SandboxError::Sealed { call: "memfd_create".into(), errno: OsErrno(libc::EMFILE) };
        assert_eq!(e.kind(), SandboxErrorKind::BrokerUnavailable);
    }

    #[test]
    fn refused_user_namespace_means_unavailable() {
        let e = SandboxError::Unshare { flags: "CLONE_NEWUSER".into(), errno: OsErrno(libc::EPERM) };
        assert_eq!(e.kind(), SandboxErrorKind::Unavailable);
        let e = SandboxError::Unshare { flags: "CLONE_NEWUSER".into(), errno: OsErrno(libc::ENOMEM) };
        assert_eq!(e.kind(), SandboxErrorKind::SetupFailed);
    }

    #[test]
    fn every_kind_has_its_own_known_code() {
        let codes: Vec<&str> = SandboxErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        let distinct: std::collections::HashSet<&str> = codes.iter().copied().collect();
        assert_eq!(distinct.len(), codes.len(), "{codes:?}");
        let known = [
            "sandbox.invalid_spec",
            "sandbox.unavailable",
            "sandbox.limits_unavailable",
            "worker.exec_failed",
            "broker.digest_mismatch",
            "broker.unavailable",
            "sandbox.setup_failed",
            "sandbox.boot_timeout",
            "sandbox.guest_mismatch",
            "helper.mismatch",
        ];
        assert_eq!(codes, known);
        for kind in SandboxErrorKind::ALL {
            assert_eq!(kind.to_string(), kind.as_str());
        }
    }

    #[test]
    fn errors_round_trip_through_the_status_pipe() {
        let e = SandboxError::Exec { program: "nope".into(), errno: OsErrno(libc::ENOENT) };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<SandboxError>(&json).unwrap(), e);
        assert_eq!(e.kind(), SandboxErrorKind::ExecFailed);
    }
}
