//! The crate's error: a reason code and a message for people.

use airlock_core::{HasReason, ReasonCode, Refusal};
use std::fmt;

/// Why a Git query was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitError {
    code: ReasonCode,
    message: String,
}

impl GitError {
    /// An error with `code` and `message`.
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        GitError { code, message: message.into() }
    }

    /// A mapper for I/O failures while doing `what` (`internal`).
    pub fn io(what: &'static str) -> impl Fn(std::io::Error) -> GitError {
        move |e| GitError::new(ReasonCode::Internal, format!("{what}: {e}"))
    }

    /// A mapper for gix failures while doing `what` (`git.repository_invalid`).
    pub fn git<E: fmt::Display>(what: &'static str) -> impl Fn(E) -> GitError {
        move |e| GitError::new(ReasonCode::GitRepositoryInvalid, format!("{what}: {e}"))
    }

    /// The stable reason code.
    pub fn code(&self) -> ReasonCode {
        self.code
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for GitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for GitError {}

impl HasReason for GitError {
    fn reason(&self) -> ReasonCode {
        self.code
    }
}

impl From<GitError> for Refusal {
    fn from(e: GitError) -> Refusal {
        Refusal::new(e.code, e.message)
    }
}

impl From<airlock_hostfs::Error> for GitError {
    fn from(e: airlock_hostfs::Error) -> GitError {
        GitError::new(e.code(), e.message().to_string())
    }
}
