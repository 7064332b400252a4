//! Helpers shared by this crate's unit tests.

use crate::resolve::{Resolver, ResolverKind};

/// Both backends where the kernel has openat2, else the emulated one.
pub(crate) fn backends() -> Vec<Resolver> {
    let mut v = vec![Resolver::with_kind(ResolverKind::Emulated)];
    if Resolver::openat2_supported() {
        v.push(Resolver::with_kind(ResolverKind::Openat2));
    } else {
        eprintln!("openat2 unsupported here: only the emulated resolver is tested");
    }
    v
}

/// Set in the child [`run_in_mount_namespace`] starts.
pub(crate) const MOUNT_CHILD_ENV: &str = "AIRLOCK_HOSTFS_MOUNT_CHILD";

/// Runs the ignored test `child` (its full path, e.g.
/// `walk::tests::mount_crossing_child`) of this test binary in a private
/// mount namespace (`unshare -m`) and requires it to pass. Mounting needs
/// root: without it, says so and returns.
pub(crate) fn run_in_mount_namespace(child: &str) {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting needs root (run in a private mount namespace)");
        return;
    }
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child, "--ignored", "--nocapture", "--test-threads=1"])
        .env(MOUNT_CHILD_ENV, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child test ran: {text}");
}

/// Asserts the running test was started by [`run_in_mount_namespace`].
pub(crate) fn assert_mount_child() {
    assert_eq!(std::env::var(MOUNT_CHILD_ENV).as_deref(), Ok("1"), "only under unshare -m");
}
