//! Invocation ids.

use airlock_core::{ReasonCode, Refusal};

/// Longest accepted invocation id.
pub const MAX_ID_BYTES: usize = 64;

/// A fresh random id, `inv-` and 32 hex characters.
pub fn new_invocation_id() -> String {
    format!("inv-{}{}", airlock_hostfs::random_suffix(), airlock_hostfs::random_suffix())
}

/// Checks a caller-chosen id: 1–64 bytes of `[A-Za-z0-9._-]`, starting with
/// a letter or digit (so it is always a safe single file name).
pub fn check_invocation_id(id: &str) -> Result<(), Refusal> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Refusal::new(
            ReasonCode::InvocationIdInvalid,
            format!("invocation id {id:?} must be 1-{MAX_ID_BYTES} characters of A-Z a-z 0-9 . _ - starting with a letter or digit"),
        ))
    }
}

/// Refuses (`invocation.duplicate`) an id the state directory has seen: an
/// early look, so a reused id reads no file; the id is claimed atomically
/// when the call is committed.
pub(crate) fn check_unused(invocations: &airlock_hostfs::PrivateDir, id: &str) -> Result<(), Refusal> {
    if invocations.contains(id) {
        return Err(Refusal::new(
            ReasonCode::InvocationDuplicate,
            format!("invocation id {id:?} has been used before"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(check_invocation_id(&new_invocation_id()).is_ok());
        for bad in ["", ".hidden", "../x", "a/b", "-x", &"a".repeat(65), "a b"] {
            assert!(check_invocation_id(bad).is_err(), "{bad:?}");
        }
    }
}
