//! The kinds of failure every Cairn operation reports, the same on both sides of the
//! plugin boundary (they are the cases of the WIT `error` variant).

use serde::{Deserialize, Serialize};

/// What kind of failure an operation met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// An argument was malformed (bad JSON, empty field, over a size limit, ...).
    InvalidInput,
    /// The caller is not granted what the call needs.
    Denied,
    /// The thing asked for does not exist.
    NotFound,
    /// The subsystem behind the call is not available, or is stopping.
    Unavailable,
    /// Something failed inside; the message is for the operator's log.
    Internal,
}

impl ErrorKind {
    /// The kind as the WIT contract names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid-input",
            ErrorKind::Denied => "denied",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A failure with its kind and a message naming what was at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What was at fault, for the caller or the operator.
    pub message: String,
}

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for Error {}
