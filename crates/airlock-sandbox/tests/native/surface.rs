//! The kernel surface the worker still reaches: socket families (ATTACKS
//! case 26) and the host's details in `/proc` (ATTACKS case 27).
use std::collections::BTreeMap;
use std::process::Command;

use crate::util::*;

/// Opens sockets of many families with `socket(2)`, `socketpair(2)` and the
/// raw system call (family with high bits set); prints `name result` lines,
/// the result being `ok` or the errno's name.
const SOCKET_PROBE: &str = r#"
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_socket, SYS_socketpair = int(sys.argv[1]), int(sys.argv[2])
def result(r):
    e = ctypes.get_errno()
    return 'ok' if r >= 0 else errno.errorcode.get(e, str(e))
def sock(family, kind, proto=0):
    ctypes.set_errno(0)
    fd = libc.socket(family, kind, proto)
    r = result(fd)
    if fd >= 0:
        libc.close(fd)
    return r
def pair(family, kind):
    ctypes.set_errno(0)
    sv = (ctypes.c_int * 2)()
    return result(libc.socketpair(family, kind, 0, sv))
def raw(nr, family, kind):
    ctypes.set_errno(0)
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(family), ctypes.c_long(kind), ctypes.c_long(0), ctypes.c_void_p(None))
    r = result(fd)
    if nr == SYS_socket and fd >= 0:
        libc.close(fd)
    return r
STREAM, DGRAM, RAW, SEQPACKET = 1, 2, 3, 5
tries = [
    ('vsock_stream', sock(40, STREAM)),
    ('vsock_dgram', sock(40, DGRAM)),
    ('netlink_route', sock(16, RAW, 0)),
    ('netlink_audit', sock(16, RAW, 9)),
    ('packet_raw', sock(17, RAW)),
    ('packet_dgram', sock(17, DGRAM)),
    ('alg_seqpacket', sock(38, SEQPACKET)),
    ('key_raw', sock(15, RAW, 2)),
    ('bluetooth_seqpacket', sock(31, SEQPACKET)),
    ('xdp_raw', sock(44, RAW)),
    ('tipc_rdm', sock(30, 4)),
    ('family_63', sock(63, STREAM)),
    ('socketpair_vsock', pair(40, STREAM)),
    ('socketpair_netlink', pair(16, RAW)),
    ('raw_vsock_high_bits', raw(SYS_socket, (1 << 32) | 40, STREAM)),
    ('raw_socketpair_vsock', raw(SYS_socketpair, 40, STREAM)),
    ('unix_stream', sock(1, STREAM)),
    ('unix_dgram', sock(1, DGRAM)),
    ('socketpair_unix', pair(1, STREAM)),
    ('inet_stream', sock(2, STREAM)),
    ('inet_dgram', sock(2, DGRAM)),
    ('inet6_stream', sock(10, STREAM)),
    ('raw_unix_high_bits', raw(SYS_socket, (1 << 32) | 1, STREAM)),
]
for name, r in tries:
    print(name, r)
"#;

fn parse(out: &str) -> BTreeMap<String, String> {
    out.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn probe_args() -> [String; 2] {
    [libc::SYS_socket.to_string(), libc::SYS_socketpair.to_string()]
}

/// ATTACKS case 26: vsock, netlink, packet and every family but unix,
/// inet and inet6 fail with `EAFNOSUPPORT` in the worker, through
/// `socket(2)` and `socketpair(2)`; unix and inet sockets still open (in
/// the empty network namespace). The same probe on the host shows the
/// filter is what refuses: netlink opens there.
#[test]
fn attacks_26_only_unix_inet_and_inet6_sockets_open_in_the_worker() {
    let [nr_socket, nr_socketpair] = probe_args();
    let host = Command::new("python3").args(["-c", SOCKET_PROBE, &nr_socket, &nr_socketpair]).output().unwrap();
    assert!(host.status.success(), "{}", text(&host.stderr));
    let host = parse(&text(&host.stdout));
    assert_eq!(host["netlink_route"], "ok", "the host cannot open a netlink socket: the probe proves nothing");

    let o = run(sh("exec python3 -c \"$1\" \"$2\" \"$3\"", &[SOCKET_PROBE, &nr_socket, &nr_socketpair]));
    assert!(o.exit.success(), "{}", show(&o));
    let got = parse(&text(&o.stdout));
    assert_eq!(got.len(), 23, "{}", show(&o));
    for (name, result) in &got {
        let open = name.starts_with("unix")
            || name.starts_with("inet")
            || name == "socketpair_unix"
            || name == "raw_unix_high_bits";
        if name == "inet6_stream" && host[name] != "ok" {
            // No IPv6 in this kernel: nothing to compare with.
            continue;
        }
        let want = if open { "ok" } else { "EAFNOSUPPORT" };
        assert_eq!(result, want, "{name}: {}", show(&o));
    }
}

/// Reads each path inside the worker: `empty`, `errno N`, `dir N` (the
/// number of entries) or `content` followed by its first 4 KiB as hex.
const PROC_PROBE: &str = r#"
import os, sys
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            print(path, 'dir', len(os.listdir(path)))
            continue
        with open(path, 'rb') as f:
            data = f.read(4096)
        print(path, 'content ' + data.hex() if data else 'empty')
    except OSError as e:
        print(path, 'errno', e.errno)
"#;

/// ATTACKS case 27: every masked `/proc` path reads empty (a file), lists
/// nothing (a directory) or cannot be read; the host's kernel command line,
/// configuration and boot id appear nowhere in what the worker reads.
#[test]
fn attacks_27_masked_proc_paths_show_nothing_of_the_host() {
    let paths = present(MASKED_PROC);
    assert!(paths.iter().any(|p| p == "/proc/cmdline"), "this kernel has no /proc/cmdline?");
    let mut args: Vec<&str> = vec![PROC_PROBE];
    args.extend(paths.iter().map(String::as_str));
    let o = run(sh("exec python3 -c \"$@\"", &args));
    assert!(o.exit.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let got = parse(&out);
    for p in &paths {
        let r = got.get(p).unwrap_or_else(|| panic!("no answer for {p}: {}", show(&o)));
        assert!(r == "empty" || r == "dir 0" || r.starts_with("errno "), "{p} shows {r} in the worker");
    }
    // What the host shows is not in the worker's output (hex, as the probe prints).
    for secret in ["/proc/cmdline", "/proc/sys/kernel/random/boot_id"] {
        let host = std::fs::read(secret).unwrap();
        assert!(!host.is_empty(), "{secret} is empty on the host: the comparison proves nothing");
        let hex: String = host.iter().take(4096).map(|b| format!("{b:02x}")).collect();
        assert!(!out.contains(&hex), "the host's {secret} shows in the worker:\n{out}");
    }
    // A process's own entries stay readable.
    let o = run(sh("head -c 64 /proc/self/status; cat /proc/uptime >/dev/null && echo UPTIME", &[]));
    assert!(text(&o.stdout).starts_with("Name:") && text(&o.stdout).contains("UPTIME"), "{}", show(&o));
}

/// ATTACKS case 27: the OCI read-only paths are read-only mounts in the
/// worker, a masked file cannot be unmasked, and writing a kernel tunable
/// or the SysRq trigger fails.
#[test]
fn attacks_27_readonly_proc_paths_cannot_be_written_or_unmasked() {
    let script = r#"
        grep -E ' /proc(/[^ ]*)? ' /proc/self/mountinfo
        for f in /proc/sys/kernel/hostname /proc/sys/vm/drop_caches /proc/sysrq-trigger /proc/irq/default_smp_affinity; do
            (echo 1 > "$f") 2>/dev/null && echo "WROTE $f"
        done
        umount /proc/cmdline 2>/dev/null && echo UNMASKED
        umount -l /proc/sys 2>/dev/null && echo UNMASKED
        true
    "#;
    let o = run(sh(script, &[]));
    let out = text(&o.stdout);
    assert!(!out.contains("WROTE") && !out.contains("UNMASKED"), "{}", show(&o));
    let mounts: BTreeMap<&str, &str> =
        out.lines().filter_map(|l| l.split(' ').nth(4).zip(l.split(' ').nth(5))).collect();
    for p in present(READONLY_PROC) {
        let opts = mounts.get(p.as_str()).unwrap_or_else(|| panic!("{p} is not a mount in the worker:\n{out}"));
        assert!(opts.split(',').any(|o| o == "ro"), "{p} is not read-only: {opts}\n{out}");
    }
    for p in present(MASKED_PROC) {
        assert!(mounts.contains_key(p.as_str()), "{p} is not masked by a mount:\n{out}");
    }
}
