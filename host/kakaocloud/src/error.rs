//! Typed errors of the KakaoCloud client, so the controller can react
//! (back off, try another offering, give up, re-authenticate).
//!
//! Messages come from the server's error body or from the transport; request
//! bodies (user data, credentials) are never copied into an error.

use std::time::Duration;

/// What went wrong with a KakaoCloud call.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("quota exceeded: {message}")]
    QuotaExceeded { message: String },
    #[error("insufficient capacity: {message}")]
    InsufficientCapacity { message: String },
    #[error("unauthorized: {message}")]
    Unauthorized { message: String },
    #[error("forbidden: {message}")]
    Forbidden { message: String },
    #[error("throttled (retry after {retry_after:?})")]
    Throttled { retry_after: Option<Duration> },
    #[error("invalid input: {message}")]
    InvalidInput { message: String },
    #[error("conflict: {message}")]
    Conflict { message: String },
    #[error("server error {status}: {message}")]
    Server { status: u16, message: String },
    /// Timeout, refused or dropped connection: the request may or may not have
    /// reached the server.
    #[error("transport error: {message}")]
    Transport { message: String },
    #[error("unexpected response: {message}")]
    Decode { message: String },
    #[error("configuration: {message}")]
    Config { message: String },
    /// This replica may not call KakaoCloud now: its leader-election fence is closed.
    #[error("not calling KakaoCloud: this replica's leadership is not certain (fenced)")]
    Fenced,
}

impl Error {
    /// Worth retrying the same request (for an idempotent call).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Throttled { .. } | Error::Server { .. } | Error::Transport { .. }
        )
    }

    /// The request may have taken effect although it failed (so a create must
    /// be checked before it is sent again).
    pub fn may_have_happened(&self) -> bool {
        matches!(self, Error::Server { .. } | Error::Transport { .. })
    }

    /// Capacity or quota: try another offering rather than the same one.
    pub fn is_capacity(&self) -> bool {
        matches!(
            self,
            Error::InsufficientCapacity { .. } | Error::QuotaExceeded { .. }
        )
    }
}
