//! The one place where the errors of crates below the runtime become
//! refusals: a sandbox error by its [`SandboxErrorKind`], a journal error by
//! its [`JournalErrorKind`]. Neither crate knows [`ReasonCode`]; each match
//! here names every kind, so a new kind does not compile until it is given
//! its code.

use std::fmt::Display;

use airlock_core::{ReasonCode, Refusal};
use airlock_journal::{JournalError, JournalErrorKind};
use airlock_sandbox::{SandboxError, SandboxErrorKind};

/// A sandbox failure while doing `what` (e.g. `the Git driver`), as a
/// refusal whose message is `WHAT: ERROR`.
pub(crate) fn sandbox_refusal(e: &SandboxError, what: impl Display) -> Refusal {
    Refusal::new(sandbox_code(e.kind()), format!("{what}: {e}"))
}

/// The reason code of a kind of sandbox failure.
fn sandbox_code(kind: SandboxErrorKind) -> ReasonCode {
    match kind {
        SandboxErrorKind::Unavailable => ReasonCode::SandboxUnavailable,
        SandboxErrorKind::LimitsUnavailable => ReasonCode::SandboxLimitsUnavailable,
        // The tool's program could not be executed: the tool failed.
        SandboxErrorKind::ExecFailed => ReasonCode::ToolFailed,
        SandboxErrorKind::DigestMismatch => ReasonCode::BrokerDigestMismatch,
        SandboxErrorKind::BrokerUnavailable => ReasonCode::BrokerUnavailable,
        SandboxErrorKind::BootTimeout => ReasonCode::SandboxBootTimeout,
        SandboxErrorKind::GuestMismatch => ReasonCode::SandboxGuestMismatch,
        SandboxErrorKind::HelperMismatch => ReasonCode::HelperMismatch,
        // A malformed spec is the runtime's own bug, found before anything ran.
        SandboxErrorKind::InvalidSpec | SandboxErrorKind::SetupFailed => ReasonCode::SandboxSetup,
    }
}

/// A journal failure as a refusal whose message starts with the journal's
/// own code (e.g. `journal.torn_tail: …`), which is finer than the reason code.
pub fn journal_refusal(e: JournalError) -> Refusal {
    let kind = e.kind();
    Refusal::new(journal_code(kind), format!("{}: {e}", kind.as_str()))
}

/// The reason code of a kind of journal failure.
fn journal_code(kind: JournalErrorKind) -> ReasonCode {
    use JournalErrorKind as K;
    match kind {
        K::KeyMissing | K::KeyUnsafe | K::FileUnsafe => ReasonCode::JournalKeyUnsafe,
        K::Io | K::RecordTooLarge | K::InvalidRecord => ReasonCode::JournalIo,
        K::NotExported => ReasonCode::JournalNotExported,
        K::TornTail | K::Corrupt | K::KeyMismatch | K::PublicKeyInvalid | K::SignatureInvalid => {
            ReasonCode::JournalCorrupt
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind whose own code is also a reason code is reported as that code.
    #[test]
    fn a_kind_named_like_a_reason_code_keeps_it() {
        let mut same = 0;
        for kind in SandboxErrorKind::ALL {
            if let Some(code) = ReasonCode::from_str_code(kind.as_str()) {
                assert_eq!(sandbox_code(*kind), code, "{kind:?}");
                same += 1;
            }
        }
        for kind in JournalErrorKind::ALL {
            if let Some(code) = ReasonCode::from_str_code(kind.as_str()) {
                assert_eq!(journal_code(*kind), code, "{kind:?}");
                same += 1;
            }
        }
        // sandbox.unavailable, sandbox.limits_unavailable, sandbox.setup_failed,
        // broker.digest_mismatch, broker.unavailable, sandbox.boot_timeout,
        // sandbox.guest_mismatch, helper.mismatch; journal.key_unsafe,
        // journal.io, journal.corrupt, journal.not_exported.
        assert_eq!(same, 12);
    }

    #[test]
    fn refusals_name_what_failed_and_the_journal_code() {
        let e = SandboxError::Exec { program: "nope".into(), errno: airlock_sandbox::OsErrno(2) };
        let r = sandbox_refusal(&e, "the Git driver");
        assert_eq!(r.code, ReasonCode::ToolFailed);
        assert!(r.message.starts_with("the Git driver: execve(\"nope\""), "{}", r.message);
        let e = JournalError::NotExported { segments: vec![3] };
        let r = journal_refusal(e);
        assert_eq!(r.code, ReasonCode::JournalNotExported);
        assert!(r.message.starts_with("journal.not_exported: segments [3]"), "{}", r.message);
    }
}
