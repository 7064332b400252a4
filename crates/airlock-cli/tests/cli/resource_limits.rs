//! ATTACKS.md 25: memory the worker can hold outside its address space
//! (System V shared memory, POSIX message queues, memfds) is bounded, or
//! the answer's `evidence.limits` says it is not; `[sandbox] require_cgroup`
//! refuses to run without real limits; `airlock doctor` names what holds.

use crate::runkit::*;
use crate::util::{Project, Run};
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// `[tool.limits] memory_bytes` of the probes.
const MEMORY_LIMIT: u64 = 128 * MIB;

/// What a worker holding ~384 MiB of System V segments (six of 64 MiB,
/// each attached, touched and detached), filling POSIX queues and writing
/// memfds (one as large as it may grow, then 8 MiB ones up to 256 MiB in
/// all) reports as JSON. Never more than 384 MiB is asked for at once.
const HOARD: &str = r#"
import ctypes, errno, json, os, resource
libc = ctypes.CDLL(None, use_errno=True)
def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
out = {"fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0]}

libc.shmget.restype, libc.shmget.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.restype, libc.shmat.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
held, shm_err = 0, None
for _ in range(6):
    sid = libc.shmget(0, 64 << 20, 0o1000 | 0o600)
    if sid < 0:
        shm_err = "shmget:" + err(); break
    addr = libc.shmat(sid, None, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        shm_err = "shmat:" + err(); break
    ctypes.memset(addr, 1, 64 << 20)
    libc.shmdt(addr)
    held += 64 << 20
out["shm_bytes"], out["shm_error"] = held, shm_err

class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
libc.mq_open.restype = ctypes.c_int
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(MqAttr)]
libc.mq_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint]
queued, mq_err = 0, None
msg = b"x" * 8192
for q in range(64):
    attr = MqAttr(0, 10, 8192, 0)
    fd = libc.mq_open(("/hoard%d" % q).encode(), os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o600, ctypes.byref(attr))
    if fd < 0:
        mq_err = "mq_open:" + err(); break
    for _ in range(10):
        if libc.mq_send(fd, msg, len(msg), 0) != 0:
            mq_err = "mq_send:" + err(); break
        queued += len(msg)
    if mq_err: break
out["mq_bytes"], out["mq_error"] = queued, mq_err

chunk = b"m" * (1 << 20)
one = os.memfd_create("one")
one_bytes, one_err = 0, None
try:
    while one_bytes < 32 << 20:
        one_bytes += os.write(one, chunk)
except OSError as e:
    one_err = errno.errorcode.get(e.errno, str(e.errno))
out["memfd_one_bytes"], out["memfd_one_error"] = one_bytes, one_err
os.close(one)
fds, total, many_err = [], 0, None
try:
    while total < 256 << 20:
        fd = os.memfd_create("many")
        fds.append(fd)
        for _ in range(8):
            total += os.write(fd, chunk)
except OSError as e:
    many_err = errno.errorcode.get(e.errno, str(e.errno))
out["memfd_total_bytes"], out["memfd_error"] = total, many_err
print(json.dumps(out))
"#;

fn hoarder(p: &Project) -> Run {
    let extra = format!("timeout_seconds = 60\n\n[tool.limits]\nmemory_bytes = {MEMORY_LIMIT}\n");
    p.tool("hoard", &py_tool("hoard", &extra, &[], HOARD, "[output]\nformat = \"json\"\n"));
    p.run(&["run", "hoard"])
}

/// `airlock doctor`'s `limits` section on this host.
fn doctor_limits(p: &Project) -> Value {
    let run = p.run(&["doctor"]);
    run.envelope["content"]["limits"].clone()
}

/// True when this host gives workers a cgroup with both memory and pids.
fn cgroup_delegated(p: &Project) -> bool {
    let l = doctor_limits(p);
    l["memory"] == "cgroup" && l["pids"] == "cgroup"
}

#[test]
fn shared_memory_beyond_the_memory_limit_is_denied_or_reported_as_not_enforced() {
    let p = Project::new();
    let run = hoarder(&p);
    let limits = &run.envelope["evidence"]["limits"];
    assert!(limits.is_object(), "every worker call reports its limits:\n{run:#?}");
    assert_eq!(limits["ipc"], "seccomp-denied", "{run:#?}");
    if run.status() != "ok" {
        // Only a cgroup can stop the hoard by ending the tool (the OOM killer).
        assert_eq!(limits["memory"], "cgroup", "the call failed without a cgroup:\n{run:#?}");
        return;
    }
    let c = &run.envelope["content"];
    // System V segments and POSIX queues: denied, nothing held.
    assert_eq!((c["shm_bytes"].as_u64(), c["shm_error"].as_str()), (Some(0), Some("shmget:EPERM")), "{c:#}");
    assert_eq!((c["mq_bytes"].as_u64(), c["mq_error"].as_str()), (Some(0), Some("mq_open:EPERM")), "{c:#}");
    // One memfd stops at RLIMIT_FSIZE (EFBIG), like any file the tool writes.
    let fsize = c["fsize"].as_u64().unwrap();
    assert!(fsize < 32 * MIB, "{c:#}");
    assert!(c["memfd_one_bytes"].as_u64().unwrap() <= fsize, "{c:#}");
    assert_eq!(c["memfd_one_error"], "EFBIG", "{c:#}");
    // Many memfds together pass the memory limit unless a cgroup holds
    // them, and then the answer must say memfds were not bounded by it.
    let total = c["memfd_total_bytes"].as_u64().unwrap();
    if total > MEMORY_LIMIT {
        assert_eq!(limits["memory"], "rlimit", "{run:#?}");
        assert_eq!(limits["memfd"], "file-size", "{run:#?}");
        assert!(limits["cgroup_unavailable"].as_str().is_some_and(|w| !w.is_empty()), "{run:#?}");
    } else {
        assert_eq!(limits["memfd"], "cgroup", "{run:#?}");
    }
}

#[test]
fn every_worker_answer_names_its_limits_and_the_isolated_pair_names_the_broker() {
    let p = Project::new();
    p.tool("hello", &sh_tool("hello", "", &[], "echo hi", "[output]\nformat = \"text\"\n"));
    let run = p.run(&["run", "hello"]);
    run.assert_ok();
    let host = doctor_limits(&p);
    let limits = &run.envelope["evidence"]["limits"];
    for key in ["memory", "pids", "ipc", "memfd"] {
        assert_eq!(limits[key], host[key], "the answer and doctor disagree on {key}:\n{run:#?}\n{host:#}");
    }
    assert!(limits.get("broker").is_none(), "{run:#?}");

    let root = format!("data={}:r", p.path("data").display());
    let run = p.run(&["isolated", "--root", &root, "--", "sh", "-c", "echo hi"]);
    run.assert_ok();
    let limits = &run.envelope["evidence"]["limits"];
    assert_eq!(limits["memory"], host["memory"], "{run:#?}");
    assert_eq!(limits["ipc"], "seccomp-denied", "{run:#?}");
    let broker = if host["memory"] == "cgroup" { "cgroup" } else { "rlimit" };
    assert_eq!(limits["broker"], broker, "{run:#?}");
}

#[test]
fn require_cgroup_refuses_before_anything_starts_where_none_is_delegated() {
    let p = Project::with_config(
        "state_dir = \".airlock\"\n[sandbox]\nrequire_cgroup = true\n\
         [filesystem]\nroots = [\"./data:data:ro\", \"./results:results:rw\"]\n",
    );
    if cgroup_delegated(&p) {
        eprintln!("skipped: this host delegates a cgroup with memory and pids, so require_cgroup is satisfied");
        return;
    }
    p.write("data/in.txt", "hello\n");
    let doctor = p.run(&["doctor"]);
    doctor.assert_refused("sandbox.limits_unavailable", 78);
    assert_eq!(doctor.envelope["content"]["limits"]["require_cgroup"], true);

    let run = p.run(&["run", "copy", "data/in.txt", "results/out.txt"]);
    run.assert_refused("sandbox.limits_unavailable", 78);
    assert!(run.envelope["error"]["message"].as_str().unwrap().contains("cgroup_parent"), "{run:#?}");
    assert!(!p.path("results/out.txt").exists(), "{}", p.tree());

    let root = format!("data={}:r", p.path("data").display());
    let run = p.run(&["isolated", "--root", &root, "--", "sh", "-c", "echo ran"]);
    run.assert_refused("sandbox.limits_unavailable", 78);
    assert!(!run.stdout.contains("ran\\n"), "{run:#?}");

    // Nothing started: the journal has no worker record of either call,
    // and both refusals are journaled.
    let journal = p.run(&["journal", "show", "--json"]);
    let kinds: Vec<&str> = journal.envelope["content"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert!(!kinds.contains(&"WorkerStarted"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "InvocationRefused").count(), 2, "{kinds:?}");
}

#[test]
fn doctor_names_the_enforcement_in_force() {
    let p = Project::new();
    let l = doctor_limits(&p);
    for key in ["memory", "pids"] {
        assert!(l[key] == "cgroup" || l[key] == "rlimit", "{key}: {l:#}");
    }
    assert_eq!(l["ipc"], "seccomp-denied", "{l:#}");
    assert_eq!(l["require_cgroup"], false, "{l:#}");
    assert!(l["detail"].as_str().is_some_and(|d| !d.is_empty()), "{l:#}");
}
