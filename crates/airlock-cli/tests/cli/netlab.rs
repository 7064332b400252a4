//! A lab of network namespaces for the cluster tests (issue 23): one
//! namespace per host, each with one veth (`eth0`, 10.99.0.N/24) joined to
//! a bridge in a hub namespace of its own, so nothing of the lab touches
//! the host's own network and two labs never meet. A host is cut off by
//! setting its `eth0` down: its peers see silence, not a reset, as across a
//! real network that fails.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Labs made by this process (for unique names).
static LABS: AtomicU32 = AtomicU32::new(0);

/// The namespaces of one lab, deleted (with their links) when dropped.
pub struct Lab {
    prefix: String,
    hosts: Vec<String>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for host in self.hosts.iter().map(|h| self.ns(h)).chain([format!("{}-hub", self.prefix)]) {
            let _ = Command::new("ip").args(["netns", "del", &host]).status();
        }
    }
}

/// `ip ARGS`, which must succeed.
#[track_caller]
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl Lab {
    /// A lab of `hosts`, or `None` (said loudly) where this process may not
    /// make network namespaces and `AIRLOCK_TEST_NETNS_REQUIRED` is not set
    /// (CI sets it).
    pub fn new(hosts: &[&str]) -> Option<Lab> {
        let n = LABS.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("airlock-lab-{}-{n}", std::process::id());
        let hub = format!("{prefix}-hub");
        let made = rustix::process::geteuid().is_root()
            && Command::new("ip")
                .args(["netns", "add", &hub])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        if !made {
            assert!(
                std::env::var_os("AIRLOCK_TEST_NETNS_REQUIRED").is_none(),
                "network namespaces are required here (AIRLOCK_TEST_NETNS_REQUIRED) and cannot be made (root and iproute2)"
            );
            eprintln!("SKIPPED: network namespaces cannot be made here (root and iproute2 are needed)");
            return None;
        }
        let lab = Lab { prefix, hosts: hosts.iter().map(|h| (*h).to_owned()).collect() };
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        for (i, host) in hosts.iter().enumerate() {
            let ns = lab.ns(host);
            ip(&["netns", "add", &ns]);
            // Names in the host's namespace for a moment: at most 15 bytes.
            let (near, far) = (
                format!("alh{}x{n}x{i}", std::process::id() % 100_000),
                format!("alp{}x{n}x{i}", std::process::id() % 100_000),
            );
            ip(&["link", "add", &near, "type", "veth", "peer", "name", &far]);
            ip(&["link", "set", &near, "netns", &hub]);
            ip(&["link", "set", &far, "netns", &ns]);
            ip(&["-n", &hub, "link", "set", &near, "master", "br0"]);
            ip(&["-n", &hub, "link", "set", &near, "up"]);
            ip(&["-n", &ns, "link", "set", &far, "name", "eth0"]);
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", lab.addr(host)), "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        Some(lab)
    }

    /// The namespace of `host`.
    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    /// The address of `host` on the lab's network.
    pub fn addr(&self, host: &str) -> String {
        let i = self.hosts.iter().position(|h| h == host).expect("a host of the lab");
        format!("10.99.0.{}", i + 1)
    }

    /// Cuts `host` off the lab's network (its peers hear nothing more).
    pub fn cut(&self, host: &str) {
        ip(&["-n", &self.ns(host), "link", "set", "eth0", "down"]);
    }

    /// Joins `host` to the network again.
    pub fn mend(&self, host: &str) {
        ip(&["-n", &self.ns(host), "link", "set", "eth0", "up"]);
    }

    /// Runs `f` with `host`'s network (see [`in_netns`]).
    pub fn within<T: Send>(&self, host: &str, f: impl FnOnce() -> T + Send) -> T {
        in_netns(&self.ns(host), f)
    }
}

/// `program`, to be run in the network namespace `netns` (`None`: this
/// process's). `ip netns exec` execs it: the child's pid is the program's.
pub fn command_in(netns: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Runs `f` on a thread that has entered the network namespace `ns` (its
/// sockets are that namespace's).
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(&path).expect("open a lab namespace");
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&ns),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("enter a lab namespace");
            f()
        })
        .join()
        .expect("a thread in a lab namespace")
    })
}
