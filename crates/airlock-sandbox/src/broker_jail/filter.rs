//! The broker's seccomp filter: a default-deny allowlist of exactly what the
//! serve loop needs (frames on fd 0, and a stream's file passed on it with
//! `sendmsg`, allowed on fd 0 only; file operations beneath held
//! directories, the allocator, exit). Anything else kills the process
//! (`SECCOMP_RET_KILL_PROCESS`), as does a call made with another
//! architecture's convention or, on x86_64, an x32 number (never listed).
//! Built by a pure function and compiled with `seccompiler`.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

use crate::error::SandboxError;

/// Calls allowed with any arguments, each with why the serve loop needs it.
fn unconditional() -> Vec<(i64, &'static str)> {
    let mut calls = vec![
        (libc::SYS_read, "frames from the socket, file contents"),
        (libc::SYS_ppoll, "waiting for a frame on the socket (airlock_fsproto::wait_ready)"),
        (libc::SYS_write, "frames to the socket, staged bytes, messages on stderr"),
        (libc::SYS_readv, "buffered reads in std"),
        (libc::SYS_writev, "buffered writes in std"),
        (libc::SYS_pread64, "positional reads"),
        (libc::SYS_lseek, "directory stream rewinds"),
        (libc::SYS_openat, "per-component resolution, O_TMPFILE"),
        (libc::SYS_openat2, "kernel resolution beneath a root"),
        (libc::SYS_close, "every descriptor it opens"),
        (libc::SYS_fstat, "file identity and type"),
        (libc::SYS_newfstatat, "fstatat(AT_SYMLINK_NOFOLLOW) of a target or staging entry"),
        (libc::SYS_statx, "mount ids for the emulated resolver"),
        (libc::SYS_getdents64, "listing"),
        (libc::SYS_linkat, "naming the O_TMPFILE under its staging name"),
        (libc::SYS_renameat2, "staging entry over the target"),
        (libc::SYS_unlinkat, "removing a staging entry after a failed rename"),
        (libc::SYS_fsync, "the staged file and its directory"),
        (libc::SYS_fdatasync, "std's sync_data"),
        (libc::SYS_sync_file_range, "starting a chunked write's writeback before its commit's fsync"),
        (libc::SYS_brk, "allocator"),
        (libc::SYS_mmap, "allocator"),
        (libc::SYS_munmap, "allocator"),
        (libc::SYS_mremap, "allocator (growing buffers)"),
        (libc::SYS_madvise, "allocator (returning memory)"),
        (libc::SYS_mprotect, "allocator (arena guard pages)"),
        (libc::SYS_futex, "std's locks (stderr, stdin)"),
        (libc::SYS_rt_sigreturn, "return from a signal handler"),
        (libc::SYS_rt_sigprocmask, "std and libc signal masking"),
        (libc::SYS_sigaltstack, "std's stack-overflow handler teardown"),
        (libc::SYS_getrandom, "hash map seeds"),
        (libc::SYS_clock_gettime, "time, when the vDSO is unavailable"),
        (libc::SYS_exit, "thread exit"),
        (libc::SYS_exit_group, "process exit"),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.push((libc::SYS_renameat, "rename on x86_64 (aarch64 has only renameat2)"));
    calls
}

/// `fcntl(2)` commands allowed: descriptor flags only (no `F_SETOWN`,
/// leases, locks, seals or pipe sizes).
const FCNTL_COMMANDS: [(u64, &str); 4] = [
    (libc::F_GETFD as u64, "F_GETFD"),
    (libc::F_SETFD as u64, "F_SETFD"),
    (libc::F_GETFL as u64, "F_GETFL"),
    (libc::F_DUPFD_CLOEXEC as u64, "F_DUPFD_CLOEXEC"),
];

/// The allowlist: system call number → rules (an empty list allows the
/// call with any arguments; otherwise any one rule must match). Pure.
pub(crate) fn broker_filter_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = unconditional().into_iter().map(|(nr, _)| (nr, vec![])).collect();
    let fcntl = FCNTL_COMMANDS
        .iter()
        .map(|(cmd, _)| {
            // Argument 1 is an int: compare its low 32 bits only.
            let cond = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *cmd)
                .expect("argument 1 is a valid seccomp argument");
            SeccompRule::new(vec![cond]).expect("a rule with one condition")
        })
        .collect();
    rules.insert(libc::SYS_fcntl, fcntl);
    // Only on descriptor 0, the socket to airlock: a stream's file handed
    // over with the answer that opened it (`SCM_RIGHTS`). No other socket
    // can exist here (no socket, connect or accept), and the file is one
    // the broker could already read or write for airlock.
    let on_socket = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, 0)
        .expect("argument 0 is a valid seccomp argument");
    rules.insert(libc::SYS_sendmsg, vec![SeccompRule::new(vec![on_socket]).expect("a rule with one condition")]);
    rules
}

/// Compiles [`broker_filter_rules`] for the running architecture.
pub(crate) fn compile_broker_filter() -> Result<BpfProgram, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(format!("unsupported architecture: {e:?}")))?;
    let filter = SeccompFilter::new(broker_filter_rules(), SeccompAction::KillProcess, SeccompAction::Allow, arch)
        .map_err(|e| SandboxError::Seccomp(format!("broker filter: {e}")))?;
    BpfProgram::try_from(filter).map_err(|e| SandboxError::Seccomp(format!("compile broker filter: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_holds_what_the_loop_needs_and_nothing_dangerous() {
        let rules = broker_filter_rules();
        for nr in [
            libc::SYS_read,
            libc::SYS_ppoll,
            libc::SYS_write,
            libc::SYS_openat2,
            libc::SYS_linkat,
            libc::SYS_renameat2,
            libc::SYS_fsync,
            libc::SYS_sync_file_range,
            libc::SYS_getdents64,
            libc::SYS_exit_group,
        ] {
            assert_eq!(rules.get(&nr).map(Vec::len), Some(0), "{nr} allowed unconditionally");
        }
        for nr in [
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_bind,
            libc::SYS_sendto,
            libc::SYS_recvmsg,
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_ptrace,
            libc::SYS_ioctl,
            libc::SYS_kill,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_mount,
            libc::SYS_pivot_root,
            libc::SYS_chdir,
            libc::SYS_fchdir,
            libc::SYS_fchmodat,
            libc::SYS_fchownat,
            libc::SYS_ftruncate,
            libc::SYS_symlinkat,
            libc::SYS_mkdirat,
            libc::SYS_mknodat,
            libc::SYS_io_uring_setup,
            libc::SYS_bpf,
            libc::SYS_prctl,
            libc::SYS_seccomp,
            libc::SYS_memfd_create,
            libc::SYS_open_by_handle_at,
        ] {
            assert!(!rules.contains_key(&nr), "{nr} must not be allowed");
        }
        assert_eq!(rules[&libc::SYS_fcntl].len(), FCNTL_COMMANDS.len(), "fcntl only with listed commands");
        assert_eq!(rules[&libc::SYS_sendmsg].len(), 1, "sendmsg only on descriptor 0");
    }

    #[test]
    fn the_filter_compiles_deterministically() {
        assert_eq!(compile_broker_filter().unwrap(), compile_broker_filter().unwrap());
    }
}
