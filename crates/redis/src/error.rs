//! Errors of building a `RedisStore`, and how Redis errors become `spillway_core::Error`
//! on the request path (with whether a retry can help).

use std::time::Duration;

use redis::{RedisError, RetryMethod};

/// Why a [`RedisStore`](crate::RedisStore) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is malformed or names an unknown kind of deployment.
    #[error("invalid store URL {0}")]
    InvalidUrl(String),
    /// A builder setting is invalid.
    #[error("invalid store setting: {0}")]
    InvalidSetting(String),
    /// Redis refused or failed the connection.
    #[error("cannot connect to Redis at {url}: {source}")]
    Connect {
        /// The store URL, password hidden.
        url: String,
        /// What Redis or the network said.
        source: RedisError,
        /// Whether trying again later may succeed.
        transient: bool,
    },
    /// No connection within the connect timeout.
    #[error("cannot connect to Redis at {url}: no answer within {timeout:?}")]
    ConnectTimeout {
        /// The store URL, password hidden.
        url: String,
        /// How long it waited.
        timeout: Duration,
    },
}

impl Error {
    /// Whether trying again later may succeed (the server may come up); a bad URL or
    /// setting never will.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::InvalidUrl(_) | Error::InvalidSetting(_) => false,
            Error::Connect { transient, .. } => *transient,
            Error::ConnectTimeout { .. } => true,
        }
    }

    /// Names the URL in a connection error.
    pub(crate) fn at(self, url: String) -> Error {
        match self {
            Error::Connect {
                source, transient, ..
            } => Error::Connect {
                url,
                source,
                transient,
            },
            Error::ConnectTimeout { timeout, .. } => Error::ConnectTimeout { url, timeout },
            other => other,
        }
    }
}

/// Whether retrying `e` can help: network trouble, failovers, a loading or busy
/// server. A script error (bad arguments, a key of another type) never will.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    !matches!(e.retry_method(), RetryMethod::NoRetry) || e.is_timeout() || e.is_io_error()
}
