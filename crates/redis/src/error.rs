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
    /// A TLS file is missing, unreadable or malformed, or the files do not fit together.
    #[error("Redis TLS: {0}")]
    Tls(String),
    /// Redis refused or failed the connection.
    #[error("cannot connect to Redis at {url}: {error}{}", diagnose(error, *tls).0)]
    Connect {
        /// The store URL, password hidden.
        url: String,
        /// What Redis or the network said.
        error: RedisError,
        /// Whether trying again later may succeed.
        transient: bool,
        /// Whether the store was to speak TLS.
        tls: bool,
    },
    /// Connected, but the decision code could not run: an ACL user without `FCALL`
    /// (or, without functions, `EVALSHA` and `EVAL`) or `TIME`, scripts disabled, …
    #[error("Redis at {url} cannot run Spillway's decision script: {why}")]
    Script {
        /// The store URL, password hidden.
        url: String,
        /// What Redis said.
        why: String,
        /// Whether trying again later may succeed.
        transient: bool,
    },
    /// The server is older than Spillway runs on ([`MIN_REDIS`](crate::MIN_REDIS)).
    #[error("Redis at {url} is too old: {why}")]
    TooOld {
        /// The store URL, password hidden.
        url: String,
        /// Its version, the oldest Spillway runs on, and what the older one lacks.
        why: String,
    },
    /// No connection within the connect timeout.
    #[error("cannot connect to Redis at {url}: no answer within {timeout:?}{}",
        if *tls { " (a server that does not speak TLS never answers a TLS handshake: use redis:// if the port is plaintext)" } else { "" })]
    ConnectTimeout {
        /// The store URL, password hidden.
        url: String,
        /// How long it waited.
        timeout: Duration,
        /// Whether the store was to speak TLS.
        tls: bool,
    },
}

impl Error {
    /// Whether trying again later may succeed (the server may come up); a bad URL or
    /// setting never will.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::InvalidUrl(_)
            | Error::InvalidSetting(_)
            | Error::Tls(_)
            | Error::TooOld { .. } => false,
            Error::Connect { transient, .. } | Error::Script { transient, .. } => *transient,
            Error::ConnectTimeout { .. } => true,
        }
    }

    /// Names the URL in a connection error.
    pub(crate) fn at(self, url: String) -> Error {
        match self {
            Error::Connect {
                error,
                transient,
                tls,
                ..
            } => Error::Connect {
                url,
                error,
                transient,
                tls,
            },
            Error::ConnectTimeout { timeout, tls, .. } => {
                Error::ConnectTimeout { url, timeout, tls }
            }
            Error::Script { why, transient, .. } => Error::Script {
                url,
                why,
                transient,
            },
            other => other,
        }
    }
}

/// Whether a connection error can pass by itself: network trouble can, a certificate
/// that fails its checks or a TLS/plaintext mismatch will not (`serve` exits rather
/// than waiting for it).
pub(crate) fn connect_transient(e: &RedisError, tls: bool) -> bool {
    is_transient(e) && diagnose(e, tls).1
}

/// What a connection error most likely means, for errors whose own words do not
/// say it (rustls names the failed check; Redis only drops a plaintext client), and
/// whether it can pass by itself.
fn diagnose(e: &RedisError, tls: bool) -> (&'static str, bool) {
    let text = e.to_string().to_ascii_lowercase();
    let has = |s: &str| text.contains(s);
    let hint = if has("certificaterequired") {
        " (Redis asks for a client certificate: give one and its key)"
    } else if has("unknownissuer") || has("unknown issuer") {
        " (Redis's certificate is not signed by a CA this store trusts: give the CA file of the CA that signed it)"
    } else if has("notvalidforname") || has("not valid for name") {
        " (Redis's certificate does not name the host in the URL: connect by a name or address it holds, or verify the chain only)"
    } else if has("alert") && (has("unknownca") || has("badcertificate") || has("decrypterror")) {
        " (Redis refused the client certificate: is it signed by a CA Redis trusts?)"
    } else if has("alert") && has("certificateexpired") {
        " (Redis refused the client certificate: it has expired)"
    } else if has("expired") {
        " (Redis's certificate has expired)"
    } else if has("notvalidyet") || has("not valid yet") || has("not valid before") {
        " (Redis's certificate is not valid yet: check its dates and this machine's clock)"
    } else if has("authentication failed") || has("wrongpass") {
        " (the user or password is wrong)"
    } else if !tls && (has("reset by peer") || has("broken pipe")) {
        " (a TLS port drops plaintext clients: use rediss:// if the port is TLS)"
    } else if tls && (has("invalidcontenttype") || has("corrupt message")) {
        " (the port does not speak TLS: use redis:// if it is plaintext)"
    } else {
        return ("", true);
    };
    (hint, false)
}

/// Whether retrying `e` can help: network trouble, failovers, a loading or busy
/// server. A script error (bad arguments, a key of another type) never will.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    !matches!(e.retry_method(), RetryMethod::NoRetry) || e.is_timeout() || e.is_io_error()
}

/// A reply Redis should never give to a call (the decision script's, or a counted
/// batch's pipeline): a bug here or there, not worth a retry.
pub(crate) fn unexpected(why: impl std::fmt::Display) -> spillway_core::Error {
    spillway_core::Error::Store {
        source: format!("unexpected reply from Redis: {why}").into(),
        transient: false,
    }
}
