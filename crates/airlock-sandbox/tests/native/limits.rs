//! Memory outside the address space: System V IPC and POSIX message queues
//! are denied, a memfd stops at the file-size limit, and a tier that
//! requires a cgroup refuses to start where none is delegated.
use airlock_sandbox::{Enforcement, SandboxErrorKind, SharedCgroup, Tier, WorkerSpec};

use crate::util::*;

/// Tries each System V and POSIX queue call through ctypes and prints the
/// errno name of each (or `ok`).
const IPC_PROBE: &str = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def name(rc):
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
print("shmget", name(libc.shmget(0, 1 << 20, 0o1000 | 0o600)))
print("msgget", name(libc.msgget(0, 0o1000 | 0o600)))
print("semget", name(libc.semget(0, 1, 0o1000 | 0o600)))
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
print("mq_open", name(libc.mq_open(b"/q", 0o100 | 0o2, 0o600, None)))
"#;

#[test]
fn system_v_ipc_and_message_queues_are_denied() {
    let o = run(WorkerSpec::new(["python3", "-c", IPC_PROBE]));
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(text(&o.stdout), "shmget EPERM\nmsgget EPERM\nsemget EPERM\nmq_open EPERM\n", "{}", show(&o));
    assert_eq!(o.limits.ipc(), "seccomp-denied");
}

#[test]
fn a_memfd_stops_at_the_file_size_limit_and_the_outcome_says_how_memory_was_bounded() {
    let script = "import os, errno\nfd = os.memfd_create('m')\nn = 0\ntry:\n    while n < (8 << 20):\n        \
                  n += os.write(fd, b'x' * 65536)\nexcept OSError as e:\n    print(errno.errorcode[e.errno], n)\n";
    let mut spec = WorkerSpec::new(["python3", "-c", script]);
    spec.limits.file_size = 1 << 20;
    let o = run(spec);
    assert!(o.exit.success(), "{}", show(&o));
    assert_eq!(text(&o.stdout), format!("EFBIG {}\n", 1 << 20), "{}", show(&o));
    match o.limits.memory() {
        Enforcement::Cgroup => assert_eq!(o.limits.memfd(), "cgroup"),
        Enforcement::Rlimit => {
            assert_eq!(o.limits.memfd(), "file-size");
            assert!(o.limits.cgroup_skipped.as_deref().is_some_and(|w| !w.is_empty()), "{:?}", o.limits);
        }
    }
}

#[test]
fn a_required_cgroup_that_is_not_delegated_refuses_before_anything_starts() {
    let not_delegated = Dir::new();
    let m = marker("require-cgroup");
    let mut tier = tier();
    tier.cgroup_parent(not_delegated.tmp.path().to_path_buf()).require_cgroup(true);
    let e = tier.start(sh("echo started", &[&m])).map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), SandboxErrorKind::LimitsUnavailable, "{e}");
    assert!(e.to_string().contains("does not delegate"), "{e}");
    assert!(processes_with(&m).is_empty());

    let e = SharedCgroup::create(Some(not_delegated.tmp.path()), Some(1 << 30), Some(16)).unwrap_err();
    assert!(e.contains("does not delegate"), "{e}");
}
