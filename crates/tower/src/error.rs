//! What can go wrong: a layer configured badly (refused when it is built, never at
//! request time), and why a request was refused (a rejection becomes a response in
//! `respond.rs`, never an `Err` from the service).

use std::sync::Arc;
use std::time::Duration;

/// A layer that cannot be built, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A layer without limits would limit nothing.
    #[error("no limits configured: add at least one with `.limit(...)`")]
    NoLimits,
    /// More limits than one atomic decision takes.
    #[error("{0} limits configured, the most one request can be checked against is {max}", max = spillway_core::MAX_BATCH)]
    TooManyLimits(usize),
    /// Names appear in headers, keys and metrics: short, plain and unique.
    #[error("limit name `{0}` must be 1 to 64 characters of A-Z, a-z, 0-9, `-`, `_` or `.`")]
    InvalidName(String),
    /// Two limits with one name would be indistinguishable in headers and metrics.
    #[error("two limits are named `{0}`")]
    DuplicateName(String),
    /// A fallback key that is not a valid key.
    #[error("invalid fallback key: {0}")]
    InvalidFallback(String),
    /// A key extractor setting (header name, trusted-proxy range, prefix length)
    /// that does not parse.
    #[error("limit `{limit}`: {message}")]
    InvalidKeySource {
        /// The limit whose key extractor is wrong.
        limit: String,
        /// What is wrong.
        message: String,
    },
    /// A lease or sync the limit cannot keep its bound with.
    #[error("limit `{limit}`: {message}")]
    InvalidSharing {
        /// The limit.
        limit: String,
        /// Why (`Sharing::check`'s message).
        message: String,
    },
    /// A `sync` limit needs a task to flush its counts: build the layer inside a Tokio
    /// runtime.
    #[error("a limit with sync needs a Tokio runtime: build the layer inside one")]
    NoRuntime,
    /// A store timeout of zero would fail every request.
    #[error("the store timeout must be more than zero (got {0:?})")]
    ZeroTimeout(Duration),
}

/// Why a request was refused before reaching the inner service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// A limit is spent. `retry_after` is `None` when the request's cost is larger
    /// than the limit can ever admit.
    Limited {
        /// The limit that denied.
        limit: Arc<str>,
        /// When the same request would be admitted.
        retry_after: Option<Duration>,
    },
    /// No key could be taken from the request for a limit, and no fallback is set.
    MissingKey {
        /// The limit whose key is missing.
        limit: Arc<str>,
        /// What was looked for (`header x-api-key`, `client IP`, …).
        source: String,
    },
    /// The store failed and the failure policy is `closed`.
    Unavailable,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Limited {
                limit,
                retry_after: Some(_),
            } => write!(f, "rate limited by `{limit}`"),
            Rejection::Limited {
                limit,
                retry_after: None,
            } => write!(
                f,
                "the request costs more than `{limit}` ever admits at once; retrying will not help"
            ),
            Rejection::MissingKey { limit, source } => {
                write!(f, "missing rate limit key for `{limit}`: no {source}")
            }
            Rejection::Unavailable => f.write_str("rate limit store unavailable"),
        }
    }
}
