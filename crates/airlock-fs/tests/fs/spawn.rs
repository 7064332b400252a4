//! Running a client process with the socket at descriptor 3.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// The `airlock-fs` command (this crate's test build of it).
pub fn airlock_fs() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_airlock-fs-testcmd"))
}

/// Runs `program args…` with `sock` at descriptor 3, `AIRLOCK_FS_FD=3`, a
/// clean environment plus `env`, and `stdin` as its standard input.
pub fn run_with_socket(program: &str, args: &[&str], sock: OwnedFd, env: &[(&str, &str)], stdin: &[u8]) -> Output {
    // An inheritable copy exists only while this child is spawned, so no
    // other test's child inherits the socket and holds it open.
    static SPAWN: Mutex<()> = Mutex::new(());
    let guard = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    // Numbered above 3, so the shell's `3<&N N<&-` never closes what it moved.
    let inheritable = rustix::io::fcntl_dupfd_cloexec(&sock, 10).unwrap();
    rustix::io::fcntl_setfd(&inheritable, rustix::io::FdFlags::empty()).unwrap();
    drop(sock);
    let n = inheritable.as_raw_fd();
    // bash: dash takes only one-digit descriptors in redirections.
    let mut cmd = Command::new("/bin/bash");
    cmd.arg("-c")
        .arg(format!("exec \"$0\" \"$@\" 3<&{n} {n}<&-"))
        .arg(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AIRLOCK_FS_FD", "3")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(inheritable);
    drop(guard);
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// Shows an output for a failing assertion.
pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
