//! Who the worker is and what it can reach: uid/gid 65534, no
//! capabilities, no new privileges, no network; the same on Docker+gVisor.
use std::net::TcpListener;
use std::time::Duration;

use super::lab::{lab, run_on, skip, Lab};
use super::util::{sh, show, text, Dir};

/// Prints `uid gid CapEff NoNewPrivs`, then tries to write the input.
const WHO: &str = "printf '%s %s ' $(id -u) $(id -g); \
    while read -r k v; do case $k in CapEff:|NoNewPrivs:) printf '%s ' $v;; esac; done < /proc/self/status; \
    echo; echo x 2>/dev/null >> in.txt && echo WROTE; cat in.txt > out.txt";

fn check_identity(lab: &Lab, runtime: Option<&str>) {
    let d = Dir::new();
    d.write("in", b"hello");
    let mut spec = sh(WHO, &[]);
    spec.inputs.push(d.input("in", "in.txt"));
    spec.output = Some(d.output("out", "out.txt", 100));
    let o = run_on(&lab.tier(runtime), spec);
    assert!(o.exit.success() && o.cleanup_confirmed, "{}", show(&o));
    let line = text(&o.stdout);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..3], ["65534", "65534", "0000000000000000"], "{line}");
    // gVisor's /proc/PID/status (2022) has no NoNewPrivs line.
    let nnp_shown = runtime != Some("runsc") || words.len() > 3;
    assert!(!nnp_shown || words[3..] == ["1"], "{line}");
    assert!(!line.contains("WROTE"));
    assert_eq!(d.read("out"), b"hello");
    assert_eq!(d.read("in"), b"hello");
}

#[test]
fn the_worker_runs_as_65534_without_capabilities() {
    let Some(lab) = lab("the_worker_runs_as_65534_without_capabilities") else { return };
    check_identity(lab, None);
}

#[test]
fn the_same_holds_on_docker_with_runsc() {
    let Some(lab) = lab("the_same_holds_on_docker_with_runsc") else { return };
    if let Some(why) = &lab.runsc_missing {
        return skip("the_same_holds_on_docker_with_runsc", &format!("Docker+runsc is not ready: {why}"));
    }
    check_identity(lab, Some("runsc"));
}

#[test]
fn the_network_is_unreachable() {
    let Some(lab) = lab("the_network_is_unreachable") else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let script = r#"
import socket, sys
port = int(sys.argv[1])
for host in ("127.0.0.1", "10.0.2.2", "8.8.8.8"):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port if host == "127.0.0.1" else 53))
        print("CONNECTED", host)
    except OSError as e:
        print("refused", host, e.errno)
print(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
"#;
    let mut spec = airlock_sandbox::WorkerSpec::new(["python3", "-c", script, &port]);
    spec.timeout = Duration::from_secs(30);
    let o = lab.run(spec);
    let out = text(&o.stdout);
    assert!(o.exit.success(), "{}", show(&o));
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(out.trim_end().ends_with("['lo']"), "{out}");
    assert!(listener.accept().is_err(), "the host's listener saw a connection");
}

#[test]
fn the_process_and_memory_limits_hold_in_the_containers_cgroup() {
    let Some(lab) = lab("the_process_and_memory_limits_hold_in_the_containers_cgroup") else { return };
    let forks = r#"
import os, time
n = 0
for i in range(40):
    try:
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
    except OSError:
        break
print(n)
"#;
    let mut spec = airlock_sandbox::WorkerSpec::new(["python3", "-c", forks]);
    spec.limits.pids = Some(8);
    spec.timeout = Duration::from_secs(30);
    let o = lab.run(spec);
    assert!(o.limits.cgroup_pids && o.limits.cgroup_limits_applied, "{:?}", o.limits);
    let forked: u32 = text(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("{}", show(&o)));
    assert!(forked < 8, "{forked} children under pids 8");

    let mut spec = airlock_sandbox::WorkerSpec::new(["python3", "-c", "b = bytearray(400 << 20); print('ALLOCATED')"]);
    spec.limits.memory_bytes = Some(64 << 20);
    spec.timeout = Duration::from_secs(30);
    let o = lab.run(spec);
    assert!(o.limits.cgroup_memory, "{:?}", o.limits);
    assert!(!o.exit.success() && !text(&o.stdout).contains("ALLOCATED"), "{}", show(&o));
    assert!(o.cleanup_confirmed);
}
