//! The crate's error: a reason code, a message for people, and the system
//! call that failed (if one did).

use airlock_core::{HasReason, ReasonCode, Refusal};
use rustix::io::Errno;
use std::fmt;

/// Why a host file operation was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: ReasonCode,
    message: String,
    errno: Option<Errno>,
}

impl Error {
    /// An error with `code` and `message`.
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        Error { code, message: message.into(), errno: None }
    }

    /// An error caused by a failed system call; `call` names it with its
    /// arguments, e.g. `openat2(ceiling, "a/b")`.
    pub fn syscall(code: ReasonCode, call: impl fmt::Display, errno: Errno) -> Self {
        Error { code, message: format!("{call}: {errno}"), errno: Some(errno) }
    }

    /// An error with every part given (the edge from [`crate::fault::Fault`]).
    pub(crate) fn from_parts(code: ReasonCode, message: String, errno: Option<Errno>) -> Self {
        Error { code, message, errno }
    }

    /// The stable reason code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The errno of the failed system call, if there was one.
    pub fn errno(&self) -> Option<Errno> {
        self.errno
    }

    /// The same error with a different code (used where the caller knows
    /// better what a missing file means, e.g. a missing output parent).
    pub fn with_code(mut self, code: ReasonCode) -> Self {
        self.code = code;
        self
    }

    /// The same error with `context` before its message.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

impl HasReason for Error {
    fn reason(&self) -> ReasonCode {
        self.code
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal::new(e.code, e.message)
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
