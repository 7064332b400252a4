//! The helper binaries of an isolated submission: the broker and the
//! `airlock-fs` client given to the worker. Each is copied once into a
//! sealed memory file while it is hashed, so the copy that was hashed (and
//! checked against an operator's pin) is the copy that runs, and that copy
//! is run once with `--handshake` ([`airlock_fsproto::Handshake`]) before
//! it gets anything: a helper of another protocol version or build is
//! refused (`helper.mismatch`) before any root is opened.

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use airlock_fsproto::{Handshake, HANDSHAKE_FLAG, MAX_HANDSHAKE};

use airlock_core::{ReasonCode, Refusal};
use airlock_sandbox::SealedProgram;

/// The broker's file name beside `airlock`.
pub(crate) const BROKER_BIN: &str = "airlock-broker";
/// The client's file name beside `airlock`.
pub(crate) const CLIENT_BIN: &str = "airlock-fs";

/// `configured`, else `NAME` in the directory of the running executable.
pub(crate) fn locate(configured: Option<&Path>, name: &str) -> Result<PathBuf, Refusal> {
    if let Some(p) = configured {
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe()
        .map_err(|e| Refusal::new(ReasonCode::BrokerUnavailable, format!("cannot locate this executable: {e}")))?;
    let dir =
        exe.parent().ok_or_else(|| Refusal::new(ReasonCode::BrokerUnavailable, "the executable has no directory"))?;
    Ok(dir.join(name))
}

/// How long a helper may take to answer its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Seals the helper `name` at `path`, checks it against `pin` (hex
/// SHA-256), then checks its handshake: this build's protocol version and
/// fingerprint, or `helper.mismatch`.
pub(crate) fn seal_verified(path: &Path, pin: Option<&str>, what: &str, name: &str) -> Result<SealedProgram, Refusal> {
    let sealed = seal(path, pin, what)?;
    verify_build(&sealed, path, what, name)?;
    Ok(sealed)
}

/// Digests of sealed helpers whose handshake matched, so a long-lived
/// airlock (`airlock mcp`) asks each helper build once.
fn verified() -> &'static Mutex<HashSet<String>> {
    static VERIFIED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    VERIFIED.get_or_init(Default::default)
}

/// Runs the sealed copy with `--handshake` alone (empty environment, no
/// other descriptors) and compares its answer with [`Handshake::ours`].
fn verify_build(sealed: &SealedProgram, path: &Path, what: &str, name: &str) -> Result<(), Refusal> {
    let digest = sealed.sha256_hex();
    if verified().lock().map(|v| v.contains(&digest)).unwrap_or(false) {
        return Ok(());
    }
    let expected = Handshake::ours(name);
    let mismatch = |found: String| {
        Refusal::new(
            ReasonCode::HelperMismatch,
            format!(
                "the {what} {} (sha256 {digest}) is not from this airlock's build: expected {name} protocol {} build                  {}, found {found}; nothing was started and no root was opened (install the {what} built with this                  airlock, or point `[broker]` at it)",
                path.display(),
                expected.proto,
                expected.build,
            ),
        )
    };
    let answer = run_handshake(sealed).map_err(&mismatch)?;
    match Handshake::parse(&answer) {
        Some(found) if found == expected => {
            if let Ok(mut v) = verified().lock() {
                v.insert(digest);
            }
            Ok(())
        }
        Some(found) => Err(mismatch(format!("{} protocol {} build {}", found.program, found.proto, found.build))),
        None => Err(mismatch(format!("no handshake (it answered {:?})", answer.trim_end()))),
    }
}

/// The sealed program's stdout when run with [`HANDSHAKE_FLAG`], if it
/// exits 0 within [`HANDSHAKE_TIMEOUT`].
fn run_handshake(sealed: &SealedProgram) -> Result<String, String> {
    // The sealed copy is executed by its descriptor (close-on-exec, which
    // the kernel honours only after it opened the program), as the broker
    // is started.
    let exe = format!("/proc/self/fd/{}", sealed.file().as_raw_fd());
    let mut child = Command::new(&exe)
        .arg(HANDSHAKE_FLAG)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("a program that cannot be started ({e})"))?;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no handshake within {} s", HANDSHAKE_TIMEOUT.as_secs()));
            }
            Err(e) => return Err(format!("a program that could not be waited for ({e})")),
        }
    };
    // Only what is already in the pipe: a descendant that kept the pipe
    // open must not hold this read.
    let mut out = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        if rustix::io::ioctl_fionbio(&stdout, true).is_ok() {
            let _ = stdout.take(MAX_HANDSHAKE as u64 + 1).read_to_end(&mut out);
        }
    }
    if !status.success() {
        return Err(format!("no handshake (`{HANDSHAKE_FLAG}` ended with {status})"));
    }
    if out.len() > MAX_HANDSHAKE {
        return Err(format!("no handshake (more than {MAX_HANDSHAKE} bytes)"));
    }
    String::from_utf8(out).map_err(|_| "no handshake (not UTF-8)".to_owned())
}

/// Seals the helper at `path` and checks it against `pin` (hex SHA-256).
pub(crate) fn seal(path: &Path, pin: Option<&str>, what: &str) -> Result<SealedProgram, Refusal> {
    let sealed = SealedProgram::open(path).map_err(|e| {
        Refusal::new(
            ReasonCode::BrokerUnavailable,
            format!("the {what} {} cannot be used: {e} (build it with `cargo build -p airlock-cli`)", path.display()),
        )
    })?;
    if let Some(pin) = pin {
        if sealed.sha256_hex() != pin {
            return Err(Refusal::new(
                ReasonCode::BrokerDigestMismatch,
                format!(
                    "the {what} {} has SHA-256 {}, not the pinned {pin}; nothing was started",
                    path.display(),
                    sealed.sha256_hex()
                ),
            ));
        }
    }
    Ok(sealed)
}

/// For `airlock doctor`: where each helper is, its SHA-256 and whether it
/// matches the operator's pin, or why it cannot be used.
pub fn helper_report(config: &airlock_core::Config) -> serde_json::Value {
    let b = &config.broker;
    let one = |configured: Option<&Path>, name: &str, pin: Option<&str>| -> serde_json::Value {
        let path = match locate(configured, name) {
            Ok(p) => p,
            Err(r) => return serde_json::json!({ "ok": false, "detail": r.message }),
        };
        match seal_verified(&path, pin, name, name) {
            Ok(sealed) => serde_json::json!({
                "ok": true,
                "detail": format!(
                    "{} (sha256 {}{}, build {})",
                    path.display(),
                    sealed.sha256_hex(),
                    if pin.is_some() { ", pinned" } else { "" },
                    airlock_fsproto::BUILD_FINGERPRINT
                ),
            }),
            Err(r) => serde_json::json!({ "ok": false, "detail": format!("{}: {}", r.code.as_str(), r.message) }),
        }
    };
    serde_json::json!({
        "broker": one(b.program.as_deref(), BROKER_BIN, b.program_sha256.as_deref()),
        "client": one(b.client.as_deref(), CLIENT_BIN, b.client_sha256.as_deref()),
    })
}
