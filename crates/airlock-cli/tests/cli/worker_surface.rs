//! ATTACKS.md 26 and 27 through `airlock run`: a python3 tool probes the
//! socket families it can open and the host details `/proc` would show,
//! and prints what it found as JSON, which the envelope carries as `content`.

use crate::runkit::*;
use crate::util::{sha256_hex, Project};
use serde_json::Value;

const JSON_OUT: &str = "[output]\nformat = \"json\"\n";

/// Runs a python tool without arguments or files, expecting `ok`; returns its content.
fn probe(name: &str, script: &str) -> Value {
    let p = Project::new();
    p.tool(name, &py_tool(name, "timeout_seconds = 20", &[], script, JSON_OUT));
    let run = p.run(&["run", name]);
    run.assert_ok();
    run.envelope["content"].clone()
}

/// ATTACKS.md 26: `socket(2)` and `socketpair(2)` of vsock, netlink, packet
/// and the other families fail with EAFNOSUPPORT (97) in the worker; unix,
/// inet and inet6 sockets still open (in the empty network namespace).
#[test]
fn attacks_26_only_unix_and_inet_sockets_open_in_a_tool() {
    let script = r#"
import ctypes, json, platform
libc = ctypes.CDLL(None, use_errno=True)
SYS_socket, SYS_socketpair = {'x86_64': (41, 53), 'aarch64': (198, 199)}[platform.machine()]
def result(r):
    return 0 if r >= 0 else ctypes.get_errno()
def sock(family, kind, proto=0):
    ctypes.set_errno(0)
    fd = libc.socket(family, kind, proto)
    if fd >= 0:
        libc.close(fd)
    return result(fd)
def pair(family, kind):
    ctypes.set_errno(0)
    sv = (ctypes.c_int * 2)()
    return result(libc.socketpair(family, kind, 0, sv))
def raw_socket(family, kind):
    ctypes.set_errno(0)
    fd = libc.syscall(ctypes.c_long(SYS_socket), ctypes.c_long(family), ctypes.c_long(kind), ctypes.c_long(0))
    if fd >= 0:
        libc.close(fd)
    return result(fd)
print(json.dumps(dict(
    denied=dict(
        vsock=sock(40, 1), netlink=sock(16, 3, 0), packet=sock(17, 3), alg=sock(38, 5), key=sock(15, 3, 2),
        bluetooth=sock(31, 5), xdp=sock(44, 3), socketpair_vsock=pair(40, 1), socketpair_netlink=pair(16, 3),
        vsock_high_bits=raw_socket((1 << 32) | 40, 1),
    ),
    allowed=dict(unix=sock(1, 1), socketpair_unix=pair(1, 1), inet=sock(2, 1), inet_dgram=sock(2, 2)),
    inet6=sock(10, 1),
)))
"#;
    let c = probe("families", script);
    let denied = c["denied"].as_object().unwrap();
    assert_eq!(denied.len(), 10, "{c:#}");
    for (family, errno) in denied {
        assert_eq!(errno, 97, "{family} did not fail with EAFNOSUPPORT: {c:#}");
    }
    for (family, errno) in c["allowed"].as_object().unwrap() {
        assert_eq!(errno, 0, "{family} did not open: {c:#}");
    }
    // IPv6 opens unless this kernel has none (then the kernel says 97, as the host would).
    let host_inet6 =
        std::net::UdpSocket::bind("[::1]:0").is_ok() || std::path::Path::new("/proc/net/if_inet6").exists();
    if host_inet6 {
        assert_eq!(c["inet6"], 0, "{c:#}");
    }
}

/// The paths the worker's `/proc` must mask: the OCI runtime spec's
/// defaults and the host details of issue 15.
const MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/interrupts",
    "/proc/cmdline",
    "/proc/config.gz",
    "/proc/kallsyms",
    "/proc/modules",
    "/proc/sys/kernel/random/boot_id",
    "/proc/meminfo",
    "/proc/kmsg",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
    "/proc/zoneinfo",
    "/proc/buddyinfo",
    "/proc/pagetypeinfo",
    "/proc/swaps",
    "/proc/diskstats",
    "/proc/partitions",
];

/// ATTACKS.md 27: each masked path reads empty, lists nothing or cannot be
/// read in a tool; the digests of what it read never match the host's
/// kernel command line or boot id; kernel tunables cannot be written.
#[test]
fn attacks_27_a_tool_reads_nothing_of_the_host_in_proc() {
    let present: Vec<&str> = MASKED.iter().copied().filter(|p| std::path::Path::new(p).exists()).collect();
    assert!(present.contains(&"/proc/cmdline"), "this kernel has no /proc/cmdline?");
    let script = format!(
        r#"
import hashlib, json, os
seen, digests = dict(), dict()
for path in {present:?}:
    try:
        if os.path.isdir(path):
            seen[path] = 'dir %d' % len(os.listdir(path))
            continue
        with open(path, 'rb') as f:
            data = f.read(1 << 16)
        seen[path] = 'bytes %d' % len(data)
        digests[path] = hashlib.sha256(data).hexdigest()
    except OSError as e:
        seen[path] = 'errno %d' % e.errno
writes = dict()
for path in ['/proc/sys/kernel/hostname', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger']:
    try:
        with open(path, 'w') as f:
            f.write('1')
        writes[path] = 'written'
    except OSError as e:
        writes[path] = 'errno %d' % e.errno
print(json.dumps(dict(seen=seen, digests=digests, writes=writes)))
"#
    );
    let c = probe("procfs", &script);
    let seen = c["seen"].as_object().unwrap();
    assert_eq!(seen.len(), present.len(), "{c:#}");
    for (path, got) in seen {
        let got = got.as_str().unwrap();
        assert!(got == "bytes 0" || got == "dir 0" || got.starts_with("errno "), "{path} shows {got} in a tool");
    }
    let digests: Vec<&str> = c["digests"].as_object().unwrap().values().map(|v| v.as_str().unwrap()).collect();
    for secret in ["/proc/cmdline", "/proc/sys/kernel/random/boot_id"] {
        let host = std::fs::read(secret).unwrap();
        assert!(!host.is_empty(), "{secret} is empty on the host: the comparison proves nothing");
        assert!(!digests.contains(&sha256_hex(&host).as_str()), "the host's {secret} reached the tool: {c:#}");
    }
    for (path, got) in c["writes"].as_object().unwrap() {
        assert_ne!(got, "written", "{path} was written by a tool: {c:#}");
    }
}
