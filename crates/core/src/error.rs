//! The one error type of `spillway-core`. A denial is not an error: it is a
//! [`Decision`](crate::Decision). `Err` means a decision could not be made.

use std::time::Duration;

/// Why a limit could not be built or a decision could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The limit's parameters are invalid (zero window, precision larger than the window, ...).
    #[error("invalid limit: {0}")]
    InvalidLimit(String),
    /// The key is empty or too long.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The request is invalid (a cost out of range, ...). Never reaches a store.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The store did not answer within its timeout.
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    /// The store failed. `transient` says whether retrying can help.
    #[error("store error: {source}")]
    Store {
        /// What the store reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// Whether a retry may succeed (connection lost, failover) or cannot (bad script).
        transient: bool,
    },
}

impl Error {
    /// Whether retrying the same call can succeed: true for timeouts and transient
    /// store failures, false for invalid input.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Timeout(_) => true,
            Error::Store { transient, .. } => *transient,
            Error::InvalidLimit(_) | Error::InvalidKey(_) | Error::InvalidRequest(_) => false,
        }
    }

    /// Whether the caller's input was at fault (maps to HTTP 400 / gRPC `INVALID_ARGUMENT`).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidLimit(_) | Error::InvalidKey(_) | Error::InvalidRequest(_)
        )
    }
}
