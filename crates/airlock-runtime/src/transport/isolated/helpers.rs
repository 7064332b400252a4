//! The helper binaries of an isolated submission: the broker and the
//! `airlock-fs` client given to the worker. Each is copied once into a
//! sealed memory file while it is hashed, so the copy that was hashed (and
//! checked against an operator's pin) is the copy that runs.

use std::path::{Path, PathBuf};

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
        match seal(&path, pin, name) {
            Ok(sealed) => serde_json::json!({
                "ok": true,
                "detail": format!("{} (sha256 {}{})", path.display(), sealed.sha256_hex(), if pin.is_some() { ", pinned" } else { "" }),
            }),
            Err(r) => serde_json::json!({ "ok": false, "detail": format!("{}: {}", r.code.as_str(), r.message) }),
        }
    };
    serde_json::json!({
        "broker": one(b.program.as_deref(), BROKER_BIN, b.program_sha256.as_deref()),
        "client": one(b.client.as_deref(), CLIENT_BIN, b.client_sha256.as_deref()),
    })
}
