//! System V IPC and POSIX message queues: denied to the worker, and why.
//!
//! Shared-memory segments, message queues and semaphore arrays live in the
//! kernel, not in the address space of the process that made them, so
//! `RLIMIT_AS` never sees them; a fresh IPC namespace starts with the
//! kernel's defaults (`kernel.shmmax`/`shmall` unlimited), so one worker
//! with `memory_bytes = 128 MiB` could hold gigabytes in segments.
//!
//! Two ways out were weighed. Writing `kernel.shm*`, `kernel.msg*`,
//! `kernel.sem` and `fs/mqueue/*` in the worker's IPC namespace works only
//! for a root caller: the kernel lets a process write those files when its
//! effective uid is the uid 0 of the namespace's owning user namespace,
//! which the worker's namespace does not map, so the check falls back to
//! host root. An unprivileged caller (its uid mapped to 65534 inside) gets
//! `EACCES` (verified on Linux 6.18 with `unshare --user --ipc`). Denying
//! the calls in seccomp is one path for every caller, needs no `/proc/sys`
//! and bounds the four kinds alike (semaphore arrays too, which no sysctl
//! limit derived from `memory_bytes` would cover). The cost: a tool that
//! needs System V IPC or POSIX message queues cannot run in the native
//! tier; POSIX semaphores and shared memory of the C library (`sem_open`,
//! `shm_open`) are files and futexes, not these calls, and are unaffected
//! (the worker has no `/dev/shm`, so `shm_open` fails on its own).
//!
//! Denying the calls that create or use an object is enough: the IPC
//! namespace is fresh and shared with no other process, so no object exists
//! for a denied `*get` to have missed. Every call of both families is listed
//! anyway, so nothing in them reaches the kernel. (x86_64 and aarch64 have
//! no `ipc(2)` multiplexer; other architectures' conventions are killed by
//! the filter's architecture check.)
#![forbid(unsafe_code)]

/// The System V IPC and POSIX message-queue calls the worker filter answers
/// with `EPERM`, each with what it would do.
pub(crate) const DENIED_CALLS: &[(i64, &str)] = &[
    (libc::SYS_shmget, "create or find a System V shared-memory segment"),
    (libc::SYS_shmat, "map a segment"),
    (libc::SYS_shmdt, "unmap a segment"),
    (libc::SYS_shmctl, "control a segment"),
    (libc::SYS_msgget, "create or find a System V message queue"),
    (libc::SYS_msgsnd, "queue a message"),
    (libc::SYS_msgrcv, "receive a message"),
    (libc::SYS_msgctl, "control a queue"),
    (libc::SYS_semget, "create or find a System V semaphore array"),
    (libc::SYS_semop, "operate on semaphores"),
    (libc::SYS_semtimedop, "operate on semaphores with a timeout"),
    (libc::SYS_semctl, "control a semaphore array"),
    (libc::SYS_mq_open, "create or open a POSIX message queue"),
    (libc::SYS_mq_unlink, "remove a POSIX message queue"),
    (libc::SYS_mq_timedsend, "queue a message"),
    (libc::SYS_mq_timedreceive, "receive a message"),
    (libc::SYS_mq_notify, "register for a queue's notification"),
    (libc::SYS_mq_getsetattr, "get or set a queue's attributes"),
];

/// How the worker's IPC objects are bounded, as the evidence names it.
pub const IPC_ENFORCEMENT: &str = "seccomp-denied";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_is_listed_once() {
        let mut nrs: Vec<i64> = DENIED_CALLS.iter().map(|(nr, _)| *nr).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), DENIED_CALLS.len());
    }

    #[test]
    fn the_worker_filter_denies_every_call() {
        let rules = crate::seccomp::worker_filter_rules();
        for (nr, what) in DENIED_CALLS {
            assert_eq!(rules.eperm.get(nr).map(Vec::len), Some(0), "{what} ({nr}) must be denied unconditionally");
        }
    }
}
